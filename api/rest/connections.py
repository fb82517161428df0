"""Waitress, the one place its internals are extended (docs/architecture.md, "The server
edge"): anyone who can reach the port can open connections without a key, so they must be cheap
and bounded in time."""

from __future__ import annotations

import errno
import json
import re
import resource
import select
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from types import FrameType
from typing import Any

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.buffers import ReadOnlyFileBasedBuffer
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, WSGITask
from waitress.utilities import Error, RequestEntityTooLarge

from titen.api.rest.body import MAX_BODY_BYTES
from titen.api.rest.errors import DEFAULT_MESSAGES, code_for, envelope
from titen.api.rest.settings import ServerSettings

_serving = threading.local()  # `channel`: the connection this thread serves
_stop_requested = False  # by a signal (`stop_on_signals`)

MAX_HEAD_BYTES = 64 * 1024
OBS_FOLD = re.compile(rb"\r\n[ \t]")  # a header line continuing the one before
HOST = re.compile(rb"\r\nhost:", re.IGNORECASE)
TRANSFER_ENCODING = re.compile(rb"\r\ntransfer-encoding:([^\r]*)", re.IGNORECASE)
VERSIONS = ("1.0", "1.1")
BACKLOG = 2048
LINGER_SECONDS = 2.0  # a refused connection stays open so the client can read the answer
LINGER_BYTES = MAX_BODY_BYTES  # and may send this much more, read and dropped
IDLE_SECONDS = 120
# Waitress counts chunk framing as body: its limit is a backstop above ours (decoded bytes).
FRAMING_ALLOWANCE = MAX_BODY_BYTES

WATCH_CLIENT = "titen.watch_client"
"""The environ's `watch(on_gone)` (`Channel.watch`); absent in-process (falcon's TestClient)."""


class RequestTimeout(Error):
    code = 408
    reason = "Request Timeout"


class VersionNotSupported(Error):
    code = 505
    reason = "HTTP Version Not Supported"


class BoundedRequest(HTTPRequestParser):
    """Refuses an over-limit body as soon as it is known to be one (waitress's own check
    refuses a body *equal* to its setting, so that is set above)."""

    completed: bool  # waitress's
    body_rcv: Any  # waitress's: None until the head declares a body
    body_started: float | None = None  # when its head ended, while its body is awaited

    def parse_header(self, header_plus: bytes) -> None:
        """Waitress's, refusing what RFC 9112 leaves no safe reading of: obs-fold (§5.2), not
        exactly one Host in HTTP/1.1 (§3.2), a version but 1.0 and 1.1 (505), and a coding
        other than `chunked` or with Content-Length too (§6.1: request smuggling)."""
        if OBS_FOLD.search(header_plus):
            raise ParsingError("a header line may not continue the one before (obs-fold)")
        codings = b",".join(TRANSFER_ENCODING.findall(header_plus)).split(b",")
        if len(codings) > 1:
            raise ParsingError("Transfer-Encoding must be exactly chunked")
        super().parse_header(header_plus)
        if self.version not in VERSIONS:
            self.error = VersionNotSupported(f"HTTP/{self.version[:16]}")
            self.body_rcv, self.chunked, self.content_length = None, False, 0
            return
        if self.version == "1.1" and len(HOST.findall(header_plus)) != 1:
            raise ParsingError("an HTTP/1.1 request needs exactly one Host header")
        framed = self.chunked or "TRANSFER_ENCODING" in self.headers
        if framed and "CONTENT_LENGTH" in self.headers:
            raise ParsingError("a request may not carry both Content-Length and Transfer-Encoding")

    def received(self, data: bytes) -> int:
        consumed = super().received(data)
        if not self.completed and self.body_rcv is not None:  # its body awaited
            self.body_started = self.body_started or time.time()
            if (len(self.body_rcv) if self.chunked else self.content_length) > MAX_BODY_BYTES:
                self.error = RequestEntityTooLarge(f"exceeds {MAX_BODY_BYTES} bytes")
                self.completed = True
        return consumed


class EnvelopeError(ErrorTask):
    """Waitress's refusal of a request it could not parse, in the envelope."""

    def execute(self) -> None:
        refusal = self.request.error
        status = refusal.code
        message = REFUSED.get(status, DEFAULT_MESSAGES[500]).format(refusal.body)
        path = getattr(self.request, "path", "")  # none when the request line was unreadable
        body = json.dumps(envelope(path, status, code_for(status), message)).encode()
        self.status = f"{status} {refusal.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)
        self.channel.linger_after_close = status != RequestTimeout.code


REFUSED = {
    408: "The request body did not arrive within {:g} s.",
    505: "{} is not supported: this server speaks HTTP/1.0 and HTTP/1.1.",
    413: DEFAULT_MESSAGES[413],
    431: f"The request head is larger than {MAX_HEAD_BYTES // 1024} KiB.",
    400: "Malformed HTTP request: {}.",
    501: "Transfer-Encoding is not supported (only chunked).",
}
"""The words of waitress's refusals, by status: templates of its detail (`str.format`)."""


class Task(WSGITask):
    """One request's answer; a HEAD answer is its head alone, chunked or not."""

    def get_environment(self) -> dict[str, Any]:
        environ = super().get_environment()
        environ[WATCH_CLIENT] = self.channel.watch
        return environ

    def service(self) -> None:
        try:
            super().service()
        finally:
            on_gone, self.channel.on_gone = self.channel.on_gone, None
            if on_gone is not None:  # it counted as idle: the loop must ask it again
                self.channel.tell_loop()

    def write(self, data: bytes) -> None:
        """The head goes out with the body's first bytes: one send, not two (`Channel.held`)."""
        channel = self.channel
        channel.holding = not self.wrote_header and bool(data)
        try:
            super().write(data)
        finally:
            channel.holding = False
            if channel.held:  # no body followed it (a 304)
                channel.write_soon(b"")

    def finish(self) -> None:
        if self.request.command == "HEAD":
            if not self.wrote_header:
                self.write(b"")  # the head, announcing chunks as GET's would
            self.chunked_response = False  # but no last chunk follows it
        super().finish()


class Channel(HTTPChannel):
    """One client connection, with deadlines on each request and a lingering close."""

    parser_class = BoundedRequest
    request: BoundedRequest | None = None  # waitress's
    task_class = Task
    error_task_class = EnvelopeError
    linger_after_close = False
    draining_until = 0.0
    drained = 0
    on_gone: Callable[[], None] | None = None  # while a request watches (`watch`)
    writing = False  # a request's thread is sending its answer itself (`write_soon`)
    holding = False  # the next `write_soon` is held back (`Task.write`)
    held = b""  # an answer's head, until its body's first bytes are written

    def __init__(self, server: Server, sock: socket.socket, addr: Any, adj: Any, map: Any = None):
        super().__init__(server, sock, addr, adj, map)
        self.head_started: float | None = self.creation_time  # at accept, else its first byte

    def received(self, data: bytes) -> bool:
        accepted = super().received(data)
        if self.request is None or self.request.headers_finished:
            self.head_started = None  # between requests (waitress's idle timeout) or in a body
        elif self.head_started is None:
            self.head_started = time.time()
        return accepted

    def check_deadlines(self, now: float) -> None:
        """End a lingering close, close a connection whose head is late, 408 a late body (through
        waitress's error task, which closes the connection)."""
        settings = self.server.settings
        body_started = getattr(self.request, "body_started", None)
        if self.draining_until:
            if now > self.draining_until:
                self._close_now()
        elif self.head_started is not None and not self.requests:
            if now - self.head_started > settings.request_head_timeout:
                self.will_close = True
        elif body_started is not None and now - body_started > settings.request_body_timeout:
            with self.requests_lock:
                request, self.request = self.request, None
                if request is not None:
                    request.error = RequestTimeout(settings.request_body_timeout)
                    request.completed = True
                    self.requests.append(request)
                    if len(self.requests) == 1:  # else the request before it starts its task
                        self.server.add_task(self)

    def watch(self, on_gone: Callable[[], None]) -> Callable[[], bool]:
        """Call `on_gone` (from the loop) when the client closes or the server stops; returns
        whether either has happened (api/rest/events.py)."""
        self.on_gone = on_gone
        self.tell_loop()
        return lambda: self.server.stopping or self.check_client_disconnected()

    def idle(self) -> bool:
        """Whether the loop may stop asking it until its socket is ready or a thread tells it
        (`tell_loop`): no request is served, or one watching it, whose thread tells."""
        return not self.requests or self.on_gone is not None

    def service(self) -> None:
        """Waitress's, the thread knowing its connection (`Server.pull_trigger`)."""
        _serving.channel = self
        try:
            super().service()
        finally:
            _serving.channel = None

    def loop_will_hear(self) -> bool:
        """No wake-up needed: nothing left to do but read, and the loop is registered for it."""
        return (
            not self.requests
            and self.readable()  # waitress's is false while output waits or it will close
            and self.server.poller.reading(self._fileno, self)
        )

    def tell_loop(self) -> None:
        """Its answers to the loop may have changed while idle: wake the loop to ask again."""
        self.server.poller.changed(self._fileno)
        self.server.pull_trigger()

    def add_channel(self, map: Any = None) -> None:
        super().add_channel(map)
        self.server.poller.changed(self._fileno)

    def del_channel(self, map: Any = None) -> None:
        self.server.poller.changed(self._fileno)
        super().del_channel(map)

    def send_continue(self) -> None:
        """Called by a request's thread as it ends: the connection, idle by then, has output."""
        super().send_continue()
        self.tell_loop()

    def end_wait(self) -> None:
        on_gone, self.on_gone = self.on_gone, None
        if on_gone is not None:
            on_gone()

    def readable(self) -> bool:
        if self.draining_until:
            return self.drained < LINGER_BYTES
        if self.on_gone is not None:  # at most one request read ahead of the waiting one
            return (
                self.connected
                and not (self.will_close or self.close_when_flushed)
                and len(self.requests) <= 1
            )
        return super().readable()

    def writable(self) -> bool:
        """Not while a request's thread sends its answer itself (`write_soon`), unless it waits
        for the loop: to flush past the high watermark, or to close after a failed send."""
        if self.draining_until or (
            self.writing
            and not (self.will_close or self.total_outbufs_len >= self.adj.outbuf_high_watermark)
        ):
            return False
        return super().writable()

    def write_soon(self, data: bytes | ReadOnlyFileBasedBuffer) -> int:
        """Waitress's, with the loop kept off while the thread writes (it spun, taking the GIL
        from the thread it waited for); what is left unsent is then the loop's."""
        if self.holding:
            self.holding, self.held = False, data
            return len(data)
        if self.held:  # the body's bytes: a file's buffer (wsgi.file_wrapper) is never held
            data, self.held = self.held + bytes(data), b""
        self.writing = True
        try:
            return super().write_soon(data)
        finally:
            self.writing = False
            if self.connected and super().writable():  # as waitress wakes it (`service`)
                self.tell_loop()  # a watched connection's output, the loop's now

    def handle_read(self) -> None:
        if not self.draining_until:
            super().handle_read()
            if not self.connected:
                self.end_wait()
            return
        try:
            self.drained += len(self.recv(self.adj.recv_bytes))  # an end of input closes
        except OSError:
            self._close_now()

    def handle_close(self) -> None:
        """After a refusal, first read and drop what the client still sends, for LINGER_SECONDS:
        closing with unread input resets the connection, losing the answer."""
        if self.draining_until or not self.linger_after_close:
            self._close_now()
            return
        try:
            self.socket.shutdown(socket.SHUT_WR)
            self.draining_until = time.time() + LINGER_SECONDS
        except OSError:
            self._close_now()

    def _close_now(self) -> None:
        self.draining_until = 0.0
        self.linger_after_close = False
        super().handle_close()
        self.end_wait()


class Server(TcpWSGIServer):
    """Waitress's TCP server with `Channel` connections."""

    channel_class = Channel
    stopping = False

    def __init__(self, app: Any, settings: ServerSettings, threads: int, sock: socket.socket):
        self.settings = settings
        self.poller = Poller({})
        super().__init__(
            app,
            map=self.poller.map,
            _sock=sock,
            adj=Adjustments(
                threads=threads,
                ident="titen",
                connection_limit=settings.connection_limit,
                backlog=BACKLOG,
                cleanup_interval=1,
                channel_timeout=IDLE_SECONDS,
                max_request_header_size=MAX_HEAD_BYTES,
                max_request_body_size=MAX_BODY_BYTES + 1 + FRAMING_ALLOWANCE,
            ),
            sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()),
            bind_socket=False,
        )

    def run(self) -> None:
        """Waitress's loop through `Poller`; as it stops, streams and long-polls end at once, as
        if their clients had gone, not after waitress's 5 s."""
        try:
            self.poller.loop(self.adj.asyncore_loop_timeout)
        except (SystemExit, KeyboardInterrupt):
            self.stopping = True
            for channel in list(self.active_channels.values()):
                channel.end_wait()
            self.task_dispatcher.shutdown()
        finally:
            self.poller.close()

    def pull_trigger(self) -> None:
        """Skipped when the loop will hear from the connection anyway (`loop_will_hear`)."""
        channel = getattr(_serving, "channel", None)
        if channel is not None and channel.server is self and channel.loop_will_hear():
            return
        super().pull_trigger()

    def maintenance(self, now: float) -> None:
        """Waitress's idle check, then the deadlines; a lost stop (`_stop`) is raised again."""
        if _stop_requested:
            raise KeyboardInterrupt
        super().maintenance(now)
        self.poller.rescan = True  # any connection may have been told to close
        for channel in list(self.active_channels.values()):
            channel.check_deadlines(now)


def stop_on_signals() -> None:
    """SIGTERM as Ctrl-C, once (later ones would cut the cleanup short). KeyboardInterrupt raised
    in a finalizer is printed and dropped: the request is remembered for `Server.maintenance`."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)


def _stop(signum: int, frame: FrameType | None) -> None:
    global _stop_requested
    _stop_requested = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


class CannotListen(Exception):
    """The server could not take its address."""


def listen(
    host: str,
    port: int,
    backlog: int | None = BACKLOG,
    doing: str = "listen on",
    reuse_port: bool = False,
) -> socket.socket:
    """A TCP socket listening (only bound if `backlog` is None) on `host`'s first address, as
    waitress would pick; with `reuse_port` the kernel shares the port's connections."""
    sock = None
    try:
        family, kind, proto, address = Adjustments(host=host, port=port).listen[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        if backlog is not None:
            sock.listen(backlog)
    except OSError as exc:
        if sock is not None:
            sock.close()
        reason = "the port is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise CannotListen(f"cannot {doing} {host}:{port}: {reason or exc}") from None
    return sock


def allow_open_files(wanted: int) -> int:
    """Raise this process's open-file limit towards `wanted` (up to the hard limit); the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return max(soft, target)


READ = select.EPOLLIN | select.EPOLLPRI
WRITE = select.EPOLLOUT
HANGUP = select.EPOLLHUP | select.EPOLLERR  # reported whatever is registered


@dataclass(slots=True)
class Registration:
    """A descriptor's entry: its dispatcher, its flags, and what it wanted when last asked."""

    dispatcher: Any
    flags: int
    wanted: int


class Poller:
    """One server's loop over `map` (fd -> dispatcher), which other threads may change.

    A pass asks `readable()`/`writable()` only of what may have changed: those not `idle()`
    when last asked, those ready, told of (`changed`), or all after `rescan`. Registrations are
    widened at once but narrowed only when they report something not wanted (narrowing at once
    cost two `epoll_ctl` calls per keep-alive request)."""

    def __init__(self, map: dict[int, Any]):
        self.map = map
        self.epoll = select.epoll()
        self.rescan = True  # ask every dispatcher at the next pass
        self.registered: dict[int, Registration] = {}
        self.asking: set[int] = set()  # to ask at the next pass
        self.told: deque[int] = deque()  # from other threads (append/pop are atomic)

    def changed(self, fd: int | None) -> None:
        """Ask `fd` again at the next pass (from any thread; the caller wakes the loop)."""
        if fd is not None:
            self.told.append(fd)

    def loop(self, timeout: float) -> None:
        while self.map:
            self.poll(timeout)

    def poll(self, timeout: float) -> None:
        for fd in self._to_ask():
            self._ask(fd)
        if self.rescan or self.told:
            timeout = 0  # changed while asked: ask again
        for fd, events in self.epoll.poll(timeout):
            self.asking.add(fd)
            entry = self.registered.get(fd)
            if entry is None:
                continue
            handled = self._handled(fd, entry, events)
            if handled != events:
                self._narrow(fd, entry)
            if handled and self.map.get(fd) is entry.dispatcher:
                wasyncore.readwrite(entry.dispatcher, handled)

    def close(self) -> None:
        self.epoll.close()

    def reading(self, fd: int, dispatcher: Any) -> bool:
        """Whether `fd` is registered for reading for `dispatcher` (from any thread; a narrowed
        one is asked again before the loop waits)."""
        entry = self.registered.get(fd)
        return entry is not None and entry.dispatcher is dispatcher and bool(entry.flags & READ)

    def _handled(self, fd: int, entry: Registration, events: int) -> int:
        """What of `events` the dispatcher wants handled, asked again if it wanted less."""
        if events & ~(entry.wanted | HANGUP) and self.map.get(fd) is entry.dispatcher:
            entry.wanted = _flags(entry.dispatcher) & entry.flags
        return events & (entry.wanted | HANGUP) if entry.wanted else 0

    def _to_ask(self) -> set[int]:
        asking, self.asking = self.asking, set()
        while self.told:
            asking.add(self.told.popleft())
        if self.rescan:
            self.rescan = False
            asking.update(self.map)
            asking.update(self.registered)  # closed since, perhaps without being told
        return asking

    def _ask(self, fd: int) -> None:
        dispatcher = self.map.get(fd)
        if dispatcher is None:
            self._unregister(fd)
            return
        idle = getattr(type(dispatcher), "idle", None)  # not through wasyncore's __getattr__
        if idle is None or not idle(dispatcher):
            self.asking.add(fd)
        if not self._register(fd, dispatcher, _flags(dispatcher)):
            self.asking.add(fd)  # closed by its thread meanwhile: its removal is told

    def _register(self, fd: int, dispatcher: Any, wanted: int) -> bool:
        """Whether `fd` is registered for at least `wanted` (for nothing, not at all: epoll
        reports a hang-up regardless, and every pass would return at once)."""
        entry = self.registered.get(fd)
        if entry is not None and entry.dispatcher is dispatcher:
            entry.wanted = wanted
            if not wanted & ~entry.flags and not entry.flags & ~wanted & WRITE:
                return True  # within the registration (but writability, reported at once)
            return self._modify(fd, entry, wanted | entry.flags & READ)  # reading: narrowed late
        self._unregister(fd)  # another dispatcher's, on a reused descriptor number
        if not wanted:
            return True
        try:
            self.epoll.register(fd, wanted)
        except OSError:
            return False
        self.registered[fd] = Registration(dispatcher, wanted, wanted)
        return True

    def _narrow(self, fd: int, entry: Registration) -> None:
        """Only now: narrowing as soon as less is wanted cost two calls per request."""
        self._modify(fd, entry, entry.wanted)

    def _modify(self, fd: int, entry: Registration, flags: int) -> bool:
        """Whether `fd` is now registered for `flags` (for none, not at all)."""
        if not flags:
            self._unregister(fd)
            return True
        try:
            self.epoll.modify(fd, flags)
        except OSError:
            del self.registered[fd]  # closed meanwhile: it is asked again at the next pass
            return False
        entry.flags = flags
        return True

    def _unregister(self, fd: int) -> None:
        if self.registered.pop(fd, None) is None:
            return
        with suppress(OSError):  # closed already, which removed it from the set
            self.epoll.unregister(fd)


def _flags(dispatcher: Any) -> int:
    flags = READ if dispatcher.readable() else 0
    if dispatcher.writable() and not dispatcher.accepting:
        flags |= WRITE
    return flags
