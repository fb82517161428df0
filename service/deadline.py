"""One attempt's deadline over every socket it opens: connect, send and every byte of the answer.

A socket timeout bounds each read, not an attempt: a receiver that drips one byte just inside
it holds the worker for as long as it likes. So each attempt has one instant after which its
sockets are shut down (by a timer thread), which ends whatever read, write or handshake is in
progress; the socket timeouts stay, set to what is left, for the operations that start later.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class Deadline:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self.passed = False
        """Whether the deadline cut the attempt short (a failure then says so, whatever the
        interrupted read raised)."""
        self._at = float("inf")
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        """Start the clock."""
        self._at = time.monotonic() + self.seconds
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()

    def left(self) -> float:
        """Seconds left; TimeoutError when none are."""
        left = self._at - time.monotonic()
        if left <= 0:
            self.passed = True
            raise TimeoutError
        return left

    def watch(self, sock: socket.socket) -> None:
        """Shut `sock` down when the deadline passes (at once if it has)."""
        with self._lock:
            self._sockets.append(sock)
            if self.passed:
                _shut(sock)

    def _cut(self) -> None:
        with self._lock:
            self.passed = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    """Shut both directions of the connection: a read blocked on it returns at once. The plain
    socket's method, so that on a TLS socket it reaches the connection without tearing down
    the TLS state another thread is reading through."""
    with contextlib.suppress(OSError):  # closed already
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
