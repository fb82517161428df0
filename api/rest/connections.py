"""Waitress, the one place its internals are extended: a server for an open port.

Anyone who can reach the port can open connections without a key, so connections must be cheap
and bounded in time: waitress's connection limit is raised far above its threads and the loop
polls through epoll. The overrides, each for a reason given where it is made: the request
parser refuses what RFC 9112 says to refuse and bodies over the limit as they arrive; refusals
answer in the JSON envelope and close lingering; a HEAD answer ends at its head, and a head goes
out with its body's first bytes; a connection has a deadline for its head and for its body; a
request waiting on a stream watches its connection; and the loop (`Poller`) asks only the
connections that may have changed, not every open one at every pass (waitress's `poll2` took
2.5 ms a pass at 2,000 open connections, and every request waited through it).
"""

from __future__ import annotations

import errno
import json
import logging
import re
import resource
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.buffers import ReadOnlyFileBasedBuffer
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher, WSGITask
from waitress.utilities import Error, RequestEntityTooLarge

from titen.api.rest.body import MAX_BODY_BYTES
from titen.api.rest.errors import DEFAULT_MESSAGES, code_for, envelope
from titen.api.rest.settings import ServerSettings
from titen.api.rest.signals import stop_requested

log = logging.getLogger("titen.server")
_serving = threading.local()
"""`channel`: the connection whose request this thread serves (`Channel.service`)."""

MAX_HEAD_BYTES = 64 * 1024
OBS_FOLD = re.compile(rb"\r\n[ \t]")
"""A header line that begins with a space or a tab: it continues the line before (obs-fold)."""
HOST = re.compile(rb"\r\nhost:", re.IGNORECASE)
TRANSFER_ENCODING = re.compile(rb"\r\ntransfer-encoding:([^\r]*)", re.IGNORECASE)
VERSIONS = ("1.0", "1.1")
BACKLOG = 2048
LINGER_SECONDS = 2.0
"""How long a refused connection stays open after the answer, so the client can read it."""
LINGER_BYTES = MAX_BODY_BYTES
"""How much a refused client may still send, read and discarded, before reading stops."""
IDLE_SECONDS = 120
"""How long a connection may stay open between requests with nothing sent."""
# Chunk framing is not body: waitress counts it against its own limit, which is therefore a
# backstop above ours (ours counts decoded bytes), not the limit itself.
FRAMING_ALLOWANCE = MAX_BODY_BYTES

WATCH_CLIENT = "titen.watch_client"
"""The WSGI environ key under which this server offers to watch the request's connection:
`watch(on_gone)` returns whether the client has gone, and calls `on_gone` (from the server's
loop) when it goes (api/rest/subscribers.py uses it). Absent in-process (falcon's TestClient):
never gone."""


class RequestTimeout(Error):
    code = 408
    reason = "Request Timeout"


class VersionNotSupported(Error):
    code = 505
    reason = "HTTP Version Not Supported"


class BoundedRequest(HTTPRequestParser):
    """A request parser that refuses an over-limit body as soon as it is known to be one (a
    declared Content-Length with the head, a chunked body once its decoded bytes pass the
    limit); waitress's own check refuses a body *equal* to its setting, so it is set above."""

    completed: bool  # waitress's: the request has been read whole (or refused)
    body_rcv: Any  # waitress's: the body's receiver, None until the head declares a body
    body_started: float | None = None
    """When its head ended, while its body is awaited (`Channel.received`)."""

    def parse_header(self, header_plus: bytes) -> None:
        """Waitress's parse, refusing (and closing the connection after the answer) what
        RFC 9112 leaves a server no safe reading of: a header line folded onto the one before
        (obs-fold, §5.2), an HTTP/1.1 request without exactly one Host (§3.2), a version
        other than 1.0 and 1.1 (505), more than one transfer coding (§6.1: only `chunked` is
        known), and a body framed both by Content-Length and Transfer-Encoding (§6.1: a proxy
        in front may have framed it the other way, and read a second, smuggled request)."""
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
        if not self.completed and self.body_rcv is not None and self._over_limit():
            self.error = RequestEntityTooLarge(f"exceeds {MAX_BODY_BYTES} bytes")
            self.completed = True
        return consumed

    def _over_limit(self) -> bool:
        if self.chunked:
            return len(self.body_rcv) > MAX_BODY_BYTES
        return self.content_length > MAX_BODY_BYTES


class EnvelopeError(ErrorTask):
    """Waitress's refusal of a request it could not parse, as `{"error": {code, message}}`."""

    def execute(self) -> None:
        refusal = self.request.error
        status = refusal.code
        message = _message(status, refusal.body)
        path = getattr(self.request, "path", "")  # none when the request line was unreadable
        body = json.dumps(envelope(path, status, code_for(status), message)).encode()
        self.status = f"{status} {refusal.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)
        # A body too slow in coming is no answer still being sent: it is closed at once.
        self.channel.linger_after_close = status != RequestTimeout.code


def _message(status: int, detail: str) -> str:
    if status == 408:
        return f"The request body did not arrive within {detail:g} s."
    if status == 505:
        return f"{detail} is not supported: this server speaks HTTP/1.0 and HTTP/1.1."
    if status == 413:
        return DEFAULT_MESSAGES[413]
    if status == 431:
        return f"The request head is larger than {MAX_HEAD_BYTES // 1024} KiB."
    if status == 400:
        return f"Malformed HTTP request: {detail}."
    if status == 501:
        return "Transfer-Encoding is not supported (only chunked)."
    return DEFAULT_MESSAGES[500]


class Task(WSGITask):
    """One request's answer; a HEAD answer is its head alone, chunked or not. Its environ
    offers the app `WATCH_CLIENT` (Channel.watch), which ends with the request."""

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
        """Waitress's, with the head sent in one piece with the first bytes of the body.
        Waitress sends the head alone, then the body: two system calls and two segments per
        answer, and a client woken by the head alone waits again for the body."""
        if self.wrote_header or not data:
            super().write(data)
            return
        with self.channel.head_held():
            super().write(data)

    def finish(self) -> None:
        if self.request.command == "HEAD":
            if not self.wrote_header:
                self.write(b"")  # the head, announcing chunks as GET's would
            self.chunked_response = False  # but no last chunk follows it
        super().finish()


class Channel(HTTPChannel):
    """One client connection, with a deadline on each request head and a lingering close."""

    parser_class = BoundedRequest
    request: BoundedRequest | None = None  # waitress's: the request being read
    task_class = Task
    error_task_class = EnvelopeError
    linger_after_close = False
    draining_until = 0.0
    drained = 0
    on_gone: Callable[[], None] | None = None
    """Set while a request waits watching its connection (`watch`): called when it closes."""
    writing = False
    """Whether a request's thread is writing its answer (`write_soon`), sending it itself."""
    holding = False
    """Whether the next `write_soon` is held back, to go out with the one after it
    (`head_held`)."""
    held = b""
    """What is held back: an answer's head, until its body's first bytes are written."""

    def __init__(self, server: Server, sock: socket.socket, addr: Any, adj: Any, map: Any = None):
        super().__init__(server, sock, addr, adj, map)
        self.head_started: float | None = self.creation_time
        """When the head now being awaited began: at accept, else at its first byte."""

    def received(self, data: bytes) -> bool:
        accepted = super().received(data)
        request = self.request
        if request is None or request.headers_finished:
            self.head_started = None  # between requests: waitress's idle timeout applies
            if request is not None and request.body_started is None:
                request.body_started = time.time()
        elif self.head_started is None:
            self.head_started = time.time()
        return accepted

    def body_overdue(self, now: float, timeout: float) -> bool:
        """Whether the body now being read began more than `timeout` seconds ago."""
        request = self.request
        started = None if request is None else request.body_started
        return started is not None and now - started > timeout

    def time_out_body(self, timeout: float) -> None:
        """Answer the request whose body is overdue with 408, as waitress answers a request it
        refuses (its error task), and close the connection after it."""
        with self.requests_lock:
            request, self.request = self.request, None
            if request is None:
                return
            request.error = RequestTimeout(timeout)
            request.completed = True
            self.requests.append(request)
            if len(self.requests) == 1:  # else the request before it starts its task
                self.server.add_task(self)

    def head_overdue(self, now: float, timeout: float) -> bool:
        """Whether this connection has spent longer than `timeout` sending one request head."""
        return (
            self.head_started is not None
            and not self.requests
            and now - self.head_started > timeout
        )

    def watch(self, on_gone: Callable[[], None]) -> Callable[[], bool]:
        """Read this connection while its request waits: call `on_gone` (from the server's
        loop) when the client closes it, or when the server stops. Returns whether either
        has happened: the waiting request should end."""
        self.on_gone = on_gone
        self.tell_loop()  # the loop then polls this connection for reading again
        return lambda: self.server.stopping or self.check_client_disconnected()

    def idle(self) -> bool:
        """Whether the loop may stop asking this connection `readable()` and `writable()`
        until its socket is ready or a thread tells it (`tell_loop`): no request is served on
        it, or only one watching it (`watch`), whose thread tells the loop of each change."""
        return not self.requests or self.on_gone is not None

    def service(self) -> None:
        """Waitress's, with this connection known to the request's thread as the one it serves
        (`Server.pull_trigger`)."""
        _serving.channel = self
        try:
            super().service()
        finally:
            _serving.channel = None

    def loop_will_hear(self) -> bool:
        """Whether the loop needs no wake-up for this connection: no request is left on it,
        it only reads, and the loop's registration for reading is in place, so the client's
        next bytes wake the loop."""
        return (
            not self.requests
            and self.readable()  # waitress's is false while output waits or it will close
            and self.server.poller.reading(self._fileno, self)
        )

    def tell_loop(self) -> None:
        """This connection's answers to the loop may have changed while it counts as idle:
        wake the loop to ask them again (from the loop's own thread, a wake for nothing)."""
        self.server.poller.changed(self._fileno)
        self.server.pull_trigger()

    def add_channel(self, map: Any = None) -> None:
        super().add_channel(map)
        self.server.poller.changed(self._fileno)

    def del_channel(self, map: Any = None) -> None:
        self.server.poller.changed(self._fileno)
        super().del_channel(map)

    def send_continue(self) -> None:
        """Waitress's, which a request's thread may call as its request ends (for one read
        partly behind it): the connection, idle by then, has output to send."""
        super().send_continue()
        self.tell_loop()

    def end_wait(self) -> None:
        """Wake the request waiting on this connection, if one is: the server is stopping."""
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
        if self.draining_until or (self.writing and not self._waited_for()):
            return False  # a request's thread is sending its answer itself (`write_soon`)
        return super().writable()

    def _waited_for(self) -> bool:
        """Whether the request's thread, inside its write, waits for the loop: to send a
        buffer at or over its high watermark (waitress wakes the thread only below it), or to
        close the connection after a failed send or a cancel (`will_close`)."""
        return bool(self.will_close or self.total_outbufs_len >= self.adj.outbuf_high_watermark)

    def write_soon(self, data: bytes | ReadOnlyFileBasedBuffer) -> int:
        """Waitress's, with the loop told to keep off while the request's thread writes: the
        loop, seeing output and a writable socket but not the buffer's lock, spun and took the
        interpreter lock from the thread it waited for. What the thread could not send is the
        loop's once it is done, so it wakes the loop then."""
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

    @contextmanager
    def head_held(self) -> Iterator[None]:
        """Hold the next `write_soon` (an answer's head) back, to go out in one send with the
        one after it (the body's first bytes), or at the end of the block if none follows (a
        304 drops the body)."""
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
            if self.held:
                self.write_soon(b"")

    def handle_read(self) -> None:
        if not self.draining_until:
            super().handle_read()
            self._notice_gone()
            return
        try:
            self.drained += len(self.recv(self.adj.recv_bytes))  # an end of input closes
        except OSError:
            self._close_now()

    def handle_close(self) -> None:
        """Close; after a refusal, first stop writing and read (and drop) what the client still
        sends, for LINGER_SECONDS: closing with unread input resets the connection, and a
        client still sending could lose the answer before reading it."""
        if self.draining_until or not self.linger_after_close:
            self._close_now()
            return
        try:
            self.socket.shutdown(socket.SHUT_WR)
        except OSError:
            self._close_now()
            return
        self.draining_until = time.time() + LINGER_SECONDS

    def _close_now(self) -> None:
        self.draining_until = 0.0
        self.linger_after_close = False
        super().handle_close()
        self._notice_gone()

    def _notice_gone(self) -> None:
        on_gone = self.on_gone
        if on_gone is not None and not self.connected:
            self.on_gone = None
            on_gone()


class Dispatcher(ThreadedTaskDispatcher):
    """Waitress's request threads, which first tell `before_shutdown` when they are stopped."""

    before_shutdown: Callable[[], None] = staticmethod(lambda: None)

    def shutdown(self, cancel_pending: bool = True, timeout: int = 5) -> bool:
        self.before_shutdown()
        return bool(super().shutdown(cancel_pending, timeout))


class Server(TcpWSGIServer):
    """Waitress's TCP server with `Channel` connections and their deadlines enforced. When it
    stops (SIGTERM, Ctrl-C), open streams end and waiting long-polls answer at once, as if
    their clients had gone, rather than holding the stop for waitress's 5 s."""

    channel_class = Channel
    stopping = False

    def __init__(
        self,
        application: Any,
        settings: ServerSettings,
        threads: int,
        sock: socket.socket,
    ):
        """Serve on `sock`, a listening socket opened by `listen`."""
        adjustments = Adjustments(
            host=settings.host,
            port=settings.port,
            threads=threads,
            ident="titen",
            connection_limit=settings.connection_limit,
            backlog=BACKLOG,
            cleanup_interval=1,
            channel_timeout=IDLE_SECONDS,
            max_request_header_size=MAX_HEAD_BYTES,
            max_request_body_size=MAX_BODY_BYTES + 1 + FRAMING_ALLOWANCE,
        )
        dispatcher = Dispatcher()
        dispatcher.before_shutdown = self._end_waits
        dispatcher.set_thread_count(threads)
        self.request_head_timeout = settings.request_head_timeout
        self.request_body_timeout = settings.request_body_timeout
        dispatchers: dict[int, Any] = {}
        self.poller = Poller(dispatchers)
        super().__init__(
            application,
            map=dispatchers,
            _sock=sock,
            dispatcher=dispatcher,
            adj=adjustments,
            sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()),
            bind_socket=False,
        )

    def run(self) -> None:
        """Waitress's loop, polled by `Poller` rather than waitress's `poll2`; stopped as
        waitress stops it (KeyboardInterrupt: the request threads, then return)."""
        try:
            self.poller.loop(self.adj.asyncore_loop_timeout)
        except (SystemExit, KeyboardInterrupt):
            self.task_dispatcher.shutdown()
        finally:
            self.poller.close()

    def pull_trigger(self) -> None:
        """Waitress's wake-up of the loop, skipped when a request's thread ends its request
        on a connection the loop will hear from anyway (`Channel.loop_will_hear`)."""
        channel = getattr(_serving, "channel", None)
        if channel is not None and channel.server is self and channel.loop_will_hear():
            return
        super().pull_trigger()

    def _end_waits(self) -> None:
        self.stopping = True
        for channel in list(self.active_channels.values()):
            channel.end_wait()

    def maintenance(self, now: float) -> None:
        """A stop asked for but lost (api/rest/signals.py) ends the loop; else waitress's idle
        check, then the head deadline and the end of each lingering close."""
        if stop_requested():
            raise KeyboardInterrupt  # ends waitress's loop, which `serve` then stops in order
        super().maintenance(now)
        self.poller.rescan = True  # any connection may have been told to close
        for channel in list(self.active_channels.values()):
            if channel.draining_until and now > channel.draining_until:
                channel._close_now()
            elif channel.head_overdue(now, self.request_head_timeout):
                channel.will_close = True
            elif channel.body_overdue(now, self.request_body_timeout):
                channel.time_out_body(self.request_body_timeout)


class CannotListen(Exception):
    """The server could not take its address (in use, not this machine's, not allowed)."""


def listen(
    host: str,
    port: int,
    backlog: int | None = BACKLOG,
    doing: str = "listen on",
    reuse_port: bool = False,
) -> socket.socket:
    """A listening TCP socket on the first address `host` resolves to (as waitress would pick),
    or only bound if `backlog` is None; CannotListen saying why (`cannot {doing} HOST:PORT:
    ...`) if it cannot be had. With `reuse_port` (SO_REUSEPORT) other sockets of this user
    that set it too may take the same port, and the kernel shares connections between them."""
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
        soft = target
    return soft


READ = select.EPOLLIN | select.EPOLLPRI
WRITE = select.EPOLLOUT
HANGUP = select.EPOLLHUP | select.EPOLLERR
"""Reported whatever a descriptor is registered for."""


class Registration:
    """A descriptor's entry in the epoll set: whose it is, what it is registered for, and what
    its dispatcher wanted when last asked (never more than registered)."""

    __slots__ = ("dispatcher", "flags", "wanted")

    def __init__(self, dispatcher: Any, flags: int):
        self.dispatcher = dispatcher
        self.flags = self.wanted = flags


class Poller:
    """One server's loop over `map` (descriptor -> dispatcher), which other threads may change.

    Registrations stay in one epoll set between passes, and a pass asks `readable()` and
    `writable()` again only of what may have changed: the dispatchers not idle when last asked
    (`idle()`, asked first; one without it never is), those ready or opened or closed since,
    those a thread told of (`changed`), and all at the pass after `rescan`. A registration is
    widened at once but narrowed only when it reports something not wanted: a keep-alive
    connection wants nothing while its request is served and to read again after, and narrowing
    at once cost two `epoll_ctl` calls per request."""

    def __init__(self, map: dict[int, Any]):
        self.map = map
        self.epoll = select.epoll()
        self.rescan = True
        """Ask every dispatcher at the next pass (the first pass does)."""
        self.registered: dict[int, Registration] = {}
        self.asking: set[int] = set()
        """The descriptors to ask at the next pass: not idle, or ready at the last pass."""
        self.told: deque[int] = deque()
        """Descriptors other threads said may have changed (appended and popped atomically)."""

    def changed(self, fd: int | None) -> None:
        """Ask `fd` again at the next pass (from any thread): a dispatcher was added or removed
        there, or its answers may have changed. Whoever calls this wakes the loop if it must
        act soon (the server's trigger); the pass after the next wakeup asks it anyway."""
        if fd is not None:
            self.told.append(fd)

    def loop(self, timeout: float) -> None:
        """Poll until the map is empty (or an exception ends the loop, as KeyboardInterrupt
        does), waiting at most `timeout` seconds a pass."""
        while self.map:
            self.poll(timeout)

    def poll(self, timeout: float) -> None:
        """One pass: ask what may have changed, wait for readiness, handle what is ready."""
        for fd in self._to_ask():
            self._ask(fd)
        if self.rescan or self.told:
            timeout = 0  # changed while asked (the server's maintenance runs then): ask again
        for fd, events in self.epoll.poll(timeout):
            self.asking.add(fd)  # its answers may change once it is handled
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
        """Whether `fd` is registered for reading, for `dispatcher` (from any thread). A
        registration loses reading only when it reported something not wanted (`_narrow`),
        or when its dispatcher is gone: in the first case the descriptor is asked again
        before the loop waits, so a thread that saw it registered need not wake the loop."""
        entry = self.registered.get(fd)
        return entry is not None and entry.dispatcher is dispatcher and bool(entry.flags & READ)

    def _handled(self, fd: int, entry: Registration, events: int) -> int:
        """What of `events` the dispatcher wants handled; asked again if it wanted less when
        last asked (a request served then may have ended since, and it may read again)."""
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
        """Register `fd` for what its dispatcher now wants (nothing if it is gone), and keep
        asking it while it is not idle."""
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
        """Whether `fd` is now registered for at least what its dispatcher `wanted` (nothing
        registered for nothing: epoll reports a hang-up even then, and a connection whose
        request is being served would make every pass return at once)."""
        entry = self.registered.get(fd)
        if entry is not None and entry.dispatcher is dispatcher:
            entry.wanted = wanted
            if not wanted & ~entry.flags and not entry.flags & ~wanted & WRITE:
                return True  # within the registration (but writability, reported at once)
            flags = wanted | entry.flags & READ  # reading is narrowed only late (`_narrow`)
            if not flags:
                self._unregister(fd)
                return True
            try:
                self.epoll.modify(fd, flags)
            except OSError:
                del self.registered[fd]
                return False
            entry.flags = flags
            return True
        self._unregister(fd)  # another dispatcher's, on a reused descriptor number
        if not wanted:
            return True
        try:
            self.epoll.register(fd, wanted)
        except OSError:
            return False
        self.registered[fd] = Registration(dispatcher, wanted)
        return True

    def _narrow(self, fd: int, entry: Registration) -> None:
        """Register `fd` for no more than its dispatcher wants: it reported something else."""
        if not entry.wanted:
            self._unregister(fd)
            return
        try:
            self.epoll.modify(fd, entry.wanted)
        except OSError:
            del self.registered[fd]  # closed meanwhile: it is asked again at the next pass
            return
        entry.flags = entry.wanted

    def _unregister(self, fd: int) -> None:
        if self.registered.pop(fd, None) is None:
            return
        with suppress(OSError):  # closed already, which removed it from the set
            self.epoll.unregister(fd)


def _flags(dispatcher: Any) -> int:
    """What waitress's `poll2` would register the dispatcher for."""
    flags = READ if dispatcher.readable() else 0
    if dispatcher.writable() and not dispatcher.accepting:
        flags |= WRITE
    return flags
