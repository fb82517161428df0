"""A hostile webhook receiver on loopback: a raw TCP server that reads each request and then
misbehaves as `behaviour` says (drips its answer, stalls, answers NUL bytes, closes early,
speaks another protocol), recording every connection and when the client hung up."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support import read_http_request

DRIP_SECONDS = 60.0
"""How long a dripping or stalling receiver would keep going if the client let it."""
DRIP_INTERVAL = 0.2
"""Between two dripped bytes: well inside any per-read timeout."""


@dataclass
class Connection:
    opened: float
    """time.monotonic() when the request had been read."""
    closed: float | None = None
    """When the client was seen hanging up (None while it has not)."""
    sock: socket.socket | None = field(default=None, repr=False, compare=False)

    def is_open(self) -> bool:
        """Whether the client still holds the connection: not seen hanging up, and no hang-up
        waiting to be read either. The thread serving it notices one only at its next read
        (its own thread may wait for the interpreter lock meanwhile); a count that trusted it
        saw a worker's next connection while that worker's last, cut at the deadline, still
        looked open: 8 at once where the client never held more than 7."""
        if self.closed is not None:
            return False
        if self.sock is None:
            return True
        try:
            # The socket has a timeout (its serving thread's reads), so recv would wait it out:
            # look first, and peek only at what is there.
            if not select.select([self.sock], [], [], 0)[0]:
                return True  # nothing to read: still held
            return self.sock.recv(1, socket.MSG_PEEK) != b""
        except (OSError, ValueError):
            return False  # reset, or closed here


def drip(conn: socket.socket) -> None:
    """A status line and the start of a header, then one byte every DRIP_INTERVAL."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
    _until_gone(conn, lambda: conn.sendall(b"x"))


def stall(conn: socket.socket) -> None:
    """Nothing at all."""
    _until_gone(conn, lambda: None)


def nul(conn: socket.socket) -> None:
    """A 200 whose body holds NUL and other control bytes."""
    body = b"ok\x00\x01\x1b[31m\x7fdone"
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


def close_early(conn: socket.socket) -> None:
    """Hang up without answering."""


def banner(conn: socket.socket) -> None:
    """Another protocol's greeting, as a port prober would find."""
    conn.sendall(b"SSH-2.0-OpenSSH_9.6 secret-banner\r\n")


def _until_gone(conn: socket.socket, each: Callable[[], None]) -> None:
    """Call `each` every DRIP_INTERVAL until the client hangs up (or DRIP_SECONDS pass)."""
    conn.settimeout(DRIP_INTERVAL)
    ends = time.monotonic() + DRIP_SECONDS
    while time.monotonic() < ends:
        try:
            if conn.recv(1) == b"":
                return
        except TimeoutError:
            pass
        except OSError:
            return
        try:
            each()
        except OSError:
            return


class Hostile:
    def __init__(self, behaviour: Callable[[socket.socket], None]):
        self.behaviour = behaviour
        self.connections: list[Connection] = []
        self.most_at_once = 0
        self._changed = threading.Condition()
        self._live: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/hook"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        self._live.add(conn)
        with conn:
            try:
                read_http_request(conn)
            except ConnectionError:
                return
            connection = Connection(time.monotonic(), sock=conn)
            with self._changed:
                self.connections.append(connection)
                self.most_at_once = max(self.most_at_once, self.open())
                self._changed.notify_all()
            try:
                with contextlib.suppress(OSError):  # the client may hang up at any point,
                    self.behaviour(conn)  # before the first byte sent too
            finally:
                with self._changed:
                    connection.closed = time.monotonic()
                    self._changed.notify_all()
        self._live.discard(conn)

    def open(self) -> int:
        return sum(1 for c in self.connections if c.is_open())

    def wait_for(self, condition: Callable[[], bool], timeout: float = 30) -> None:
        with self._changed:
            if not self._changed.wait_for(condition, timeout):
                raise AssertionError(f"not reached in {timeout} s: {self.connections}")

    def close(self) -> None:
        """Stop listening and hang up on every client still held, so that a server stopping
        next need not wait out its delivery deadline on them."""
        self._listener.close()
        for conn in list(self._live):
            with contextlib.suppress(OSError):  # already gone
                conn.shutdown(socket.SHUT_RDWR)
