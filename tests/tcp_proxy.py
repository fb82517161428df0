"""A TCP proxy on loopback that a test can cut and restore: a database outage for one server
without stopping the database everyone else uses.

Cut: every open connection is closed and new ones are accepted and closed at once (as a
PostgreSQL that went away looks to its clients). Restored: connections are forwarded again.
Black hole: nothing is forwarded either way and nothing is closed (a host that stopped
answering), until restored. Cut at a commit: the next client message that holds COMMIT is
forwarded (or not) and that connection is closed at once, before the server's answer can reach
the client: a commit that landed (or did not) whose answer was lost; `after` picks the
transaction: the COMMIT of the connection that next sends those bytes (a statement's text).
"""

from __future__ import annotations

import contextlib
import socket
import threading

SYNC = b"S\x00\x00\x00\x04"
"""PostgreSQL's Sync message: the end of an extended-protocol batch (a pipelined COMMIT's)."""


class TcpProxy:
    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._up = True
        self._closed = False
        self._flowing = threading.Event()
        self._flowing.set()
        self._at_commit: bool | None = None  # armed: whether to deliver the COMMIT first
        self._after: bytes | None = None  # armed for the connection that sends these bytes
        self._chosen: socket.socket | None = None  # that connection, once it sent them
        self._then_cut = False  # armed: cut everything once that COMMIT is cut
        self._answering: dict[socket.socket, threading.Event] = {}  # upstream: its answer came
        self.commits_cut = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            self._up = False
            sockets, self._open = self._open, set()
        for sock in sockets:
            _close(sock)

    def restore(self) -> None:
        with self._lock:
            self._up = True
        self._flowing.set()

    def black_hole(self) -> None:
        """Stop forwarding anything, closing nothing, until `restore`."""
        self._flowing.clear()

    def cut_at_commit(
        self, deliver: bool, after: bytes | None = None, then_cut: bool = False
    ) -> None:
        """Close the connection that next sends COMMIT, right after forwarding it (`deliver`)
        or instead of forwarding it; with `after`, only a COMMIT of the connection that sent
        those bytes first (the transaction that runs that statement); with `then_cut`, `cut`
        everything right then (the database gone before anyone can ask it what landed)."""
        with self._lock:
            self._at_commit = deliver
            self._after = after
            self._chosen = None
            self._then_cut = then_cut

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                up = self._up
            if not up:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:  # a cut since `up` was read must close this one too
                up = self._up
                if up:
                    self._open.update((client, upstream))
            if not up:
                _close(client)
                _close(upstream)
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pipe, args=(source, sink, source is client), daemon=True
                ).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while data := source.recv(65536):
                if (answered := self._answering.pop(source, None)) is not None:
                    answered.set()
                self._flowing.wait()
                if from_client and self._after is not None and self._after in data:
                    self._chosen = source
                if from_client and b"COMMIT" in data and self._commit_cut(data, source, sink):
                    return  # the server's side closes when its answer finds the client gone
                sink.sendall(data)
        except OSError:
            pass
        _close(source)
        _close(sink)

    def _commit_cut(self, data: bytes, client: socket.socket, upstream: socket.socket) -> bool:
        """If armed, disarm and cut this connection at its COMMIT: True when the pipe is to
        close. Delivering, every answer is held meanwhile and the client's side closes once the
        server has answered the COMMIT (and its Sync), so the commit has landed and its answer
        never reaches the client; not delivering, both sides close with the COMMIT unsent."""
        with self._lock:
            if self._at_commit is None or (self._after is not None and client != self._chosen):
                return False
            deliver, self._at_commit = self._at_commit, None
            self.commits_cut += 1
        if not deliver:
            _close(client)
            _close(upstream)
            return True
        answered = self._answering[upstream] = threading.Event()
        self._flowing.clear()
        try:
            upstream.sendall(data)
            at = data.index(b"COMMIT")
            pending = data[at:]
            simple = data[at - 5 : at - 4] == b"Q"  # a simple query needs no Sync after it
            while not simple and SYNC not in pending and (pending := client.recv(65536)):
                upstream.sendall(pending)
            answered.wait(10)  # the server has committed: its answer is here, held
            _close(client)
            if self._then_cut:
                self.cut()
        finally:
            self._flowing.set()
        return True


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
