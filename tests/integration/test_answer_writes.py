"""The server's loop keeps off a connection while the request's own thread writes its answer,
and still sends what that thread could not (api/rest/connections.py, `Channel.write_soon`).

Waitress's loop used to spin while a request's thread held the output buffer's lock: the
buffer had output and the socket was writable, so `poll` returned at once, every pass, until
the thread let go (27 passes per acquire at 16 connections, docs/performance.md "Round seven").
"""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from waitress.server import BaseWSGIServer

from tests.support import eventually
from titen.api.rest.connections import WATCH_CLIENT, Channel, Poller, Server, listen
from titen.api.rest.settings import ServerSettings

SEND_SECONDS = 0.05
"""How long each send of an answer takes in the first test: the lock is held that long."""
BIG = 8 * 1024 * 1024
"""An answer larger than the loopback socket's buffers and the (lowered) high watermark."""


def answer(environ: dict, start_response: Callable[..., object]) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"answer"]


@contextmanager
def serve(app: Callable[..., list[bytes]]) -> Iterator[Server]:
    server = Server(app, ServerSettings(), 2, listen("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.close()
        thread.join(timeout=5)


def get(server: Server, *, wait_before_reading: float = 0.0) -> bytes:
    """The whole answer (head and body) to one GET on a connection the server closes."""
    port = server.socket.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        time.sleep(wait_before_reading)
        chunks = []
        while chunk := client.recv(1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of passes the loop makes, counted as they happen."""
    counted = [0]
    poll = Poller.poll

    def counting(*args: Any, **kwargs: Any) -> None:
        counted[0] += 1
        poll(*args, **kwargs)

    monkeypatch.setattr(Poller, "poll", counting)
    return counted


def test_the_loop_waits_while_a_request_sends_its_answer(monkeypatch, passes):
    """Each send takes SEND_SECONDS with the buffer's lock held, and something else wakes the
    loop meanwhile: a loop that spins makes hundreds of passes; one that keeps off, a few per
    request."""
    send = Channel.send

    def slow_send(self: Channel, data: bytes, do_close: bool = True) -> int:
        self.server.pull_trigger()  # as other connections do: the loop looks at this one again
        time.sleep(SEND_SECONDS)
        return send(self, data, do_close=do_close)

    monkeypatch.setattr(Channel, "send", slow_send)
    with serve(answer) as server:
        before = passes[0]
        for _ in range(3):
            assert get(server).endswith(b"answer")
        assert passes[0] - before < 100  # measured: 17 (a spinning loop: about 69,000)


def test_an_answer_over_the_high_watermark_reaches_a_slow_reader():
    """The request's thread waits for the loop to send a buffer over its high watermark: the
    loop must take over although the thread is still inside its write."""
    body = b"x" * BIG

    def app(environ: dict, start_response: Callable[..., object]) -> list[bytes]:
        start_response(
            "200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(BIG))]
        )
        return [body[n : n + 65536] for n in range(0, BIG, 65536)]

    with serve(app) as server:
        server.adj.outbuf_high_watermark = 65536
        answer = get(server, wait_before_reading=0.3)
        assert answer.partition(b"\r\n\r\n")[2] == body


def test_the_loop_keeps_off_a_writing_connection_until_the_thread_waits_for_it():
    """The rule at its edges, on a connection no loop serves: the thread waits for the loop
    once its buffer reaches the high watermark (waitress wakes it only below), or to close."""
    server = Server(answer, ServerSettings(), 2, listen("127.0.0.1", 0))
    ours, theirs = socket.socketpair()
    try:
        channel = Channel(server, ours, ("127.0.0.1", 0), server.adj, map={})
        channel.writing = True
        channel.total_outbufs_len = server.adj.outbuf_high_watermark - 1
        assert not channel.writable()
        channel.total_outbufs_len += 1
        assert channel.writable()
        channel.total_outbufs_len = 1
        channel.will_close = True
        assert channel.writable()
        channel.will_close = channel.writing = False
        assert channel.writable()  # the thread is done: what it left is the loop's
    finally:
        theirs.close()
        ours.close()
        server.close()


@contextmanager
def channel_of(app: Callable[..., list[bytes]]) -> Iterator[tuple[Channel, socket.socket]]:
    """A connection of a server whose loop does not run (its request threads do), and the
    client's end: what the connection tells the loop stays in `server.poller.told`."""
    server = Server(app, ServerSettings(), 2, listen("127.0.0.1", 0))
    ours, theirs = socket.socketpair()
    theirs.settimeout(5)
    try:
        channel = Channel(server, ours, ("127.0.0.1", 0), server.adj, map={})
        server.poller.told.clear()
        yield channel, theirs
    finally:
        theirs.close()
        ours.close()
        server.close()


def read_answer(client: socket.socket) -> bytes:
    """What the client received up to the end of one `answer`: its head and body may come in
    separate sends, and so in separate reads."""
    received = b""
    while not received.endswith(b"answer"):
        chunk = client.recv(65536)
        assert chunk, f"the connection closed after {received!r}"
        received += chunk
    return received


def watching(environ: dict, start_response: Callable[..., object]) -> list[bytes]:
    environ[WATCH_CLIENT](lambda: None)  # as a stream or a long-poll does
    return answer(environ, start_response)


def test_a_watched_connection_tells_the_loop_of_output_left_and_of_its_request_end():
    """A stream's or a long-poll's connection counts as idle, so the loop stops asking it
    (`Poller`): what its thread leaves in the buffer, and the end of its request,
    must be told, or they would wait for the loop's next rescan."""
    with channel_of(watching) as (channel, client):
        told = channel.server.poller.told
        channel.received(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")  # served on a request thread
        read_answer(client)  # the thread sent it all itself
        fd = channel._fileno
        eventually(lambda: list(told) == [fd, fd], "its watch, then its request's end, is told")
        channel.watch(lambda: None)
        told.clear()
        channel.write_soon(b"x" * 4 * 1024 * 1024)  # more than the socket takes: the rest is
        assert channel.total_outbufs_len and list(told) == [channel._fileno]  # the loop's


def test_an_unwatched_request_tells_the_loop_nothing_but_a_100_continue_it_queued():
    """A connection whose request is served is asked at every pass, so its end needs no tell;
    a 100 Continue its thread queues as the request ends, for a request read partly behind it,
    does: the connection is idle by then."""
    with channel_of(answer) as (channel, client):
        told = channel.server.poller.told
        channel.received(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        read_answer(client)
        eventually(lambda: not channel.requests, "the request ended")
        assert not told
        channel.received(
            b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
            b"POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
        )
        eventually(lambda: channel.sent_continue, "the 100 Continue is queued")
        eventually(lambda: list(told) == [channel._fileno], "the 100 Continue is told")


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What connections send, one item per system call."""
    sent: list[bytes] = []
    send = Channel.send

    def counting(self: Channel, data: bytes, do_close: bool = True) -> int:
        count = send(self, data, do_close=do_close)
        sent.append(bytes(data[:count]))
        return count

    monkeypatch.setattr(Channel, "send", counting)
    return sent


def not_modified(environ: dict, start_response: Callable[..., object]) -> list[bytes]:
    start_response("304 Not Modified", [])
    return [b"a body a 304 may not carry"]


@pytest.mark.parametrize(
    "app, request_line, ends_with",
    [
        (answer, b"GET / HTTP/1.1", b"\r\n\r\nanswer"),
        (not_modified, b"GET / HTTP/1.1", b"\r\n\r\n"),
    ],
    ids=["head and body", "no body allowed"],
)
def test_an_answer_goes_out_in_one_send(sends, app, request_line, ends_with):
    """Waitress sends a head alone, then the body: the head waits for the body's first bytes
    and goes with them (`Task.write`), or alone if no body follows."""
    with channel_of(app) as (channel, client):
        channel.received(request_line + b"\r\nHost: t\r\n\r\n")
        eventually(lambda: not channel.requests, "the request ended")
        assert len(sends) == 1 and sends[0].endswith(ends_with), sends
        assert client.recv(65536) == sends[0]


@pytest.fixture
def wakes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the loop was woken through its trigger, and how many times a connection's
    registration was narrowed, counted as they happen."""
    counted = [0, 0]

    def counting(index: int, method: Callable[..., None]) -> Callable[..., None]:
        def counted_call(*args: Any) -> None:
            counted[index] += 1
            method(*args)

        return counted_call

    monkeypatch.setattr(BaseWSGIServer, "pull_trigger", counting(0, BaseWSGIServer.pull_trigger))
    monkeypatch.setattr(Poller, "_narrow", counting(1, Poller._narrow))
    return counted


def connect(server: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.socket.getsockname()[1]), timeout=10)


GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"


@contextmanager
def patient(server: Server) -> Iterator[None]:
    """The server's loop waits up to a minute a pass, not a second: a wake missed leaves a
    request unread longer than its client waits for the answer. At the end, the loop is woken
    and seen to begin a pass that waits as long as it did before."""
    poll = server.poller.poll
    patient, passes = [True], [0]

    def waiting_long(timeout: float) -> None:
        passes[0] += 1
        poll(60 if patient[0] else timeout)

    server.poller.poll = waiting_long  # type: ignore[method-assign]
    try:
        yield
    finally:
        patient[0] = False
        begun = passes[0]
        server.pull_trigger()
        eventually(lambda: passes[0] > begun, "the loop is out of its long wait")
        del server.poller.poll


def test_a_kept_alive_connection_wakes_the_loop_through_its_client_not_its_threads(wakes):
    """Waitress's request thread wakes the loop as each request ends, to read the connection
    again; here the loop still has it registered for reading, so the client's next request
    wakes it instead (`Server.pull_trigger`), and it is asked again then (`Poller`).
    A wake missed would leave a request unread for the loop's whole timeout."""
    with serve(answer) as server, connect(server) as client, patient(server):
        threads = server.task_dispatcher
        for _ in range(30):
            client.sendall(GET)
            read_answer(client)
            # Sent before the request's thread is done, the next request finds the loop
            # narrowing the registration (it reads nothing while a request is served), or
            # the thread a request on the connection: either wakes the loop.
            eventually(lambda: threads.active_count == 0, "the request's thread is done")
        assert wakes == [0, 0]  # waitress's thread: 30 wakes


def test_a_request_sent_while_another_is_served_is_read_when_that_one_ends(wakes):
    """The second request makes the loop narrow the connection's registration (it reads no
    more while a request is served): the first one's end must then wake the loop."""
    entered, release = threading.Event(), threading.Event()

    def slow(environ: dict, start_response: Callable[..., object]) -> list[bytes]:
        if environ["PATH_INFO"] == "/slow":
            entered.set()
            release.wait(10)
        return answer(environ, start_response)

    with serve(slow) as server, connect(server) as client, patient(server):
        client.sendall(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        assert entered.wait(10)
        client.sendall(GET)
        eventually(lambda: wakes[1] >= 1, "the registration is narrowed")
        release.set()
        answers = read_answer(client)
        while answers.count(b"answer") < 2:
            answers += read_answer(client)


def test_a_connection_closed_after_its_answer_wakes_the_loop_to_close_it():
    """The answer's thread has sent it all, and the loop still reads the connection: it must
    be woken all the same, to close it."""
    with serve(answer) as server, connect(server) as client, patient(server):
        client.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        received = b""
        while chunk := client.recv(65536):
            received += chunk
        assert received.endswith(b"answer")


def test_a_file_answer_reaches_the_client_whole():
    """Waitress sends a file (`wsgi.file_wrapper`) through the connection as a buffer, not as
    bytes, after the head written alone."""

    def a_file(environ: dict, start_response: Callable[..., object]) -> Any:
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "6")])
        return environ["wsgi.file_wrapper"](io.BytesIO(b"answer"))

    with serve(a_file) as server:
        assert get(server).endswith(b"\r\n\r\nanswer")
