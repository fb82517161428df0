"""What anyone who can reach the port can do without a key, tried with real sockets on a real
server: hold connections open, trickle a request head, send oversized heads and bodies."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterable, Iterator

import pytest

from tests.support import Http, Server
from titen.api.rest.body import MAX_BODY_BYTES
from titen.service.bootstrap import bootstrap

ACQUIRE = {"resource_type": "deploy", "resource_id": "r", "purpose": "p", "ttl_seconds": 60}
IDLE_CONNECTIONS = 2000


def make_key(database: str) -> str:
    services = bootstrap(database, pool_size=2)
    try:
        return services.keys.create("acme", "agent_a", "agent")
    finally:
        services.close()


pytestmark = pytest.mark.server("--request-head-timeout", "2", threads=4)


def connect(server: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def exchange(server: Server, head: bytes, body_chunks: Iterable[bytes] = ()) -> bytes:
    """Send a request (as much of it as the server takes) while reading its whole answer.

    A server that refuses early stops reading before the client has sent everything, as curl
    and browsers expect: they read the answer while they send, and so does this.
    """
    with connect(server) as sock:

        def send() -> None:
            try:
                sock.sendall(head)
                for chunk in body_chunks:
                    sock.sendall(chunk)
            except OSError:
                pass  # refused and closed: the answer is what counts

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        answer = b""
        while not complete(answer) and (data := sock.recv(65536)):
            answer += data
        sock.shutdown(socket.SHUT_RDWR)
        sender.join(timeout=10)
        return answer


def complete(answer: bytes) -> bool:
    head, found, body = answer.partition(b"\r\n\r\n")
    length = content_length(head) if found else None
    return length is not None and len(body) >= length


def content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return None


def envelope(answer: bytes) -> tuple[int, dict[str, str], dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, json.loads(body)


def test_two_thousand_idle_and_trickling_connections_leave_keyed_clients_served(server):
    """Connections without a key cost a socket each, not a thread: with 2,000 of them open
    (half idle, half trickling a header line now and then) every acquire is served."""
    http = Http(server.url, make_key(server.database))
    idle = [connect(server) for _ in range(IDLE_CONNECTIONS)]
    trickling = idle[: IDLE_CONNECTIONS // 2]
    for sock in trickling:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    try:
        for n in range(20):
            status, body = http.request("POST", "/v1/leases", {**ACQUIRE, "resource_id": f"r{n}"})
            assert status == 201, body
            for sock in trickling[n * 10 : n * 10 + 10]:
                sock.sendall(b"X-Slow: 1\r\n")
        assert http.request("GET", "/healthz")[0] == 200
    finally:
        for sock in idle:
            sock.close()


class Answers:
    """The answers arriving on one kept-alive connection, read one at a time (each framed by
    its Content-Length), however they are split or joined on the way."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.pending = b""

    def next(self) -> bytes:
        while not complete(self.pending):
            data = self.sock.recv(65536)
            assert data, "the server closed the connection"
            self.pending += data
        head, _, body = self.pending.partition(b"\r\n\r\n")
        length = content_length(head) or 0
        answer, self.pending = head + b"\r\n\r\n" + body[:length], body[length:]
        return answer


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"


def test_a_kept_alive_connection_is_read_again_as_soon_as_each_answer_is_sent(server):
    """100 requests one after another on one connection. The loop stops asking an idle
    connection what it wants (`Poller`); if it were not asked again when its request
    ended, each next request would wait for the loop's rescan, up to a second each."""
    with connect(server) as sock:
        answers = Answers(sock)
        started = time.monotonic()
        for _ in range(100):
            sock.sendall(HEALTHZ)
            assert answers.next().startswith(b"HTTP/1.1 200 ")
        assert time.monotonic() - started < 10  # measured: under 0.05 s; waiting for rescans, ~50 s


def test_a_request_pipelined_behind_a_long_poll_leaves_its_connection_read_again(server):
    """A long-poll's connection counts as idle while it waits (its thread tells the loop of
    what it does): with a request read ahead behind it, the loop stopped reading it, and must
    read it again once both are answered, not at its next rescan."""
    key = make_key(server.database)
    poll = (
        "GET /v1/events?after=latest&wait=0.2 HTTP/1.1\r\nHost: t\r\n"
        f"Authorization: Bearer {key}\r\n\r\n"
    ).encode()
    waited = 0.0
    with connect(server) as sock:
        answers = Answers(sock)
        for _ in range(10):
            sock.sendall(poll + HEALTHZ)
            assert answers.next().startswith(b"HTTP/1.1 200 ")
            assert answers.next().startswith(b"HTTP/1.1 200 ")
            started = time.monotonic()
            sock.sendall(HEALTHZ)
            assert answers.next().startswith(b"HTTP/1.1 200 ")
            waited += time.monotonic() - started
    assert waited < 2.5  # measured: 0.02 s; waiting for rescans, about 5 s


def test_a_connection_that_does_not_finish_its_head_in_time_is_closed(server):
    """Trickling one header line at a time holds a connection for --request-head-timeout, not
    for as long as the client likes; one that sent nothing is closed as well."""
    silent = connect(server)
    trickling = connect(server)
    started = time.monotonic()
    trickling.sendall(b"GET /healthz HTTP/1.1\r\n")
    closed_after = None
    while time.monotonic() - started < 10:
        try:
            trickling.sendall(b"X-Slow: 1\r\n")
        except OSError:
            closed_after = time.monotonic() - started
            break
        time.sleep(0.2)
    assert closed_after is not None and 2 <= closed_after < 5, closed_after
    silent.settimeout(5)
    assert silent.recv(1) == b""  # closed by the server
    silent.close()
    trickling.close()


def test_a_complete_head_is_not_cut_off_by_the_deadline(server):
    """The deadline is on the head only: a request whose head arrived is served, however long
    the connection then stays open between requests."""
    key = make_key(server.database)
    with connect(server) as sock:
        for _ in range(2):
            sock.sendall(
                b"GET /v1/handoffs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                + key.encode()
                + b"\r\n\r\n"
            )
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.endswith(b"}}"):
                answer += sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200"), answer
            time.sleep(3)  # longer than the head deadline, idle between requests


def body_of(size: int, chunk: int = 64 * 1024) -> Iterator[bytes]:
    while size > 0:
        yield b"x" * min(chunk, size)
        size -= chunk


def chunked(size: int, chunk: int = 64 * 1024) -> Iterator[bytes]:
    for part in body_of(size, chunk):
        yield f"{len(part):x}\r\n".encode() + part + b"\r\n"
    yield b"0\r\n\r\n"


class ReadCounter:
    """How many body bytes a client managed to send before the server's answer arrived."""

    def __init__(self, chunks: Iterator[bytes]):
        self.chunks = chunks
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.sent += len(chunk)
            yield chunk


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_an_oversized_body_is_refused_having_read_no_more_than_the_limit(server, framing):
    """200 MiB is refused with 413 in the envelope long before it could all be sent: the
    server stops reading at the limit instead of spooling the body to a file."""
    size = 200 * 1024 * 1024
    if framing == "chunked":
        head = b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        body = ReadCounter(chunked(size))
    else:
        head = f"POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n".encode()
        body = ReadCounter(body_of(size))
    answer = exchange(server, head + b"content-type: application/json\r\n\r\n", iter(body))
    status, headers, payload = envelope(answer)
    assert status == 413
    assert headers["content-type"] == "application/json"
    assert payload == {
        "error": {"code": "PAYLOAD_TOO_LARGE", "message": "The request body is larger than 1 MiB."}
    }
    assert body.sent < 20 * 1024 * 1024  # the server answered, then stopped taking input


def test_a_body_of_exactly_the_limit_reaches_the_application(server):
    """The limit itself is allowed (waitress's own setting refuses a body equal to it)."""
    filler = "x" * (MAX_BODY_BYTES - len(json.dumps({**ACQUIRE, "purpose": ""})))
    body = json.dumps({**ACQUIRE, "purpose": filler}).encode()
    assert len(body) == MAX_BODY_BYTES
    head = (
        f"POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        "content-type: application/json\r\nConnection: close\r\n\r\n"
    ).encode()
    status, _, payload = envelope(exchange(server, head, iter([body])))
    assert status == 401, payload  # read whole and passed on: no key, so refused by the app


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (b"GET /healthz HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400, "VALIDATION_ERROR"),
        (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", 431, "HEADERS_TOO_LARGE"),
        (b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "NOT_IMPLEMENTED"),
    ],
)
def test_waitress_refusals_answer_in_the_envelope(server, request_bytes, status, code):
    answer = exchange(server, request_bytes)
    got, headers, payload = envelope(answer)
    assert (got, payload["error"]["code"]) == (status, code)
    assert headers["content-type"] == "application/json"
    assert payload["error"]["message"]


def test_an_oversized_head_sent_slowly_still_gets_its_answer(server):
    """The server refuses a head over the limit while the client is still sending it; a
    client that reads only once it has sent everything still finds the answer (the server
    takes what else it sends for a moment before it closes, instead of resetting)."""
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        for _ in range(200):
            sock.sendall(b"X-Filler: " + b"a" * 1000 + b"\r\n")
            time.sleep(0.001)
        answer = b""
        while not complete(answer) and (data := sock.recv(65536)):
            answer += data
    got, _, payload = envelope(answer)
    assert (got, payload["error"]["code"]) == (431, "HEADERS_TOO_LARGE")


SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def test_a_request_framed_twice_is_refused_and_its_connection_closed(server):
    """Content-Length and Transfer-Encoding both: a proxy reading one framing while the server
    reads the other would pass a second request through; answered 400, the connection closes
    before anything after it is read (RFC 9112 section 6.1)."""
    body = b"0\r\n\r\n" + SMUGGLED
    head = (
        b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" % len(body)
    )
    with connect(server) as sock:
        sock.sendall(head + body)
        answer = b""
        while data := sock.recv(65536):  # until the server closes the connection
            answer += data
    status, headers, payload = envelope(answer)
    assert (status, payload["error"]["code"]) == (400, "VALIDATION_ERROR")
    assert "Content-Length and Transfer-Encoding" in payload["error"]["message"]
    assert headers["connection"] == "close"
    assert answer.count(b"HTTP/1.1") == 1  # the smuggled request was never answered


def test_an_obs_fold_header_line_is_refused(server):
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Folded: one\r\n two\r\n\r\n"
    got, _, payload = envelope(exchange(server, request))
    assert (got, payload["error"]["code"]) == (400, "VALIDATION_ERROR")
    assert "obs-fold" in payload["error"]["message"]
