"""What RFC 9112 says a server must refuse, and a request body's deadline, tried with raw
sockets on a real server: each refusal is answered in the envelope and closes the connection."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from tests.support import Http, Server, create_key, titen

BODY_TIMEOUT = 2.0
"""The test servers' --request-body-timeout (the default is 30 s)."""
DRIBBLERS = 20


pytestmark = pytest.mark.server("--request-body-timeout", str(BODY_TIMEOUT), threads=4)


def answer_then_close(server: Server, request: bytes) -> bytes:
    """Everything the server sends for `request`, until it closes the connection."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while data := sock.recv(65536):
            answer += data
        return answer


def refusal(answer: bytes) -> tuple[int, dict[str, str], dict]:
    """The one answer in `answer`: its status, headers and JSON body (which fails to parse
    if another answer follows it)."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, json.loads(body)


FOLLOWER = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
"""A second request behind the refused one, which must never be answered."""


@pytest.mark.parametrize(
    ("request_bytes", "status", "code", "said"),
    [
        (b"GET /healthz HTTP/1.1\r\n\r\n", 400, "VALIDATION_ERROR", "Host"),
        (b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "VALIDATION_ERROR", "Host"),
        (b"GET /healthz HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", 400, "VALIDATION_ERROR", "Host"),
        (b"GET /healthz HTTP/1.2\r\nHost: x\r\n\r\n", 505, "HTTP_VERSION_NOT_SUPPORTED", "1.1"),
        (b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, "HTTP_VERSION_NOT_SUPPORTED", "1.1"),
        (
            b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"
            b"0\r\n\r\n",
            400,
            "VALIDATION_ERROR",
            "Transfer-Encoding",
        ),
        (
            b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
            "VALIDATION_ERROR",
            "Transfer-Encoding",
        ),
    ],
    ids=["no-host", "two-hosts", "two-hosts-same", "http-1.2", "http-2.0", "te-list", "te-twice"],
)
def test_framing_rfc_9112_refuses_is_refused_and_closes(
    module_server, request_bytes, status, code, said
):
    got, headers, payload = refusal(answer_then_close(module_server, request_bytes + FOLLOWER))
    assert (got, payload["error"]["code"]) == (status, code), payload
    assert said in payload["error"]["message"]
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.0\r\n\r\n",  # HTTP/1.0 needs no Host
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n"
        b"Connection: close\r\n\r\n0\r\n\r\n",
    ],
    ids=["http-1.0-without-host", "http-1.1-one-host", "chunked"],
)
def test_well_framed_requests_are_still_served(module_server, request_bytes):
    answer = answer_then_close(module_server, request_bytes)
    assert answer.split(b" ", 2)[1] in (b"200", b"401", b"405"), answer  # served, not refused


def test_a_body_that_does_not_arrive_in_time_is_answered_408_and_closed(module_server):
    head = b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
    started = time.monotonic()
    got, headers, payload = refusal(answer_then_close(module_server, head))
    waited = time.monotonic() - started
    assert (got, payload["error"]["code"]) == (408, "REQUEST_TIMEOUT")
    assert f"{BODY_TIMEOUT:g} s" in payload["error"]["message"]
    assert headers["connection"] == "close"
    assert BODY_TIMEOUT <= waited < BODY_TIMEOUT + 3, waited


class Dribbler(threading.Thread):
    """An upload that sends its body one byte every half second, and reads what it is told."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.sendall(b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        self.answer = b""
        self.stopped = threading.Event()

    def run(self) -> None:
        sender = threading.Thread(target=self._dribble, daemon=True)
        sender.start()
        try:
            while data := self.sock.recv(65536):
                self.answer += data
        except OSError:
            pass
        self.stopped.set()

    def _dribble(self) -> None:
        while not self.stopped.wait(0.5):
            try:
                self.sock.send(b"x")
            except OSError:
                return


def test_dribbling_uploads_delay_a_keyed_request_by_at_most_the_body_deadline(database):
    """Twenty uploads sending a byte now and then fill --connection-limit 20; a keyed client
    waits for them to reach the body deadline, and no longer."""
    key = create_key(database, "acme", "agent_a")
    server = Server(
        database,
        4,
        "--connection-limit",
        str(DRIBBLERS),
        "--request-body-timeout",
        str(BODY_TIMEOUT),
    )
    dribblers = []
    try:
        dribblers = [Dribbler(server.port) for _ in range(DRIBBLERS)]
        for dribbler in dribblers:
            dribbler.start()
        started = time.monotonic()
        status, body = Http(server.url, key).request("GET", "/v1/handoffs")
        waited = time.monotonic() - started
        assert status == 200, body
        assert waited < BODY_TIMEOUT + 2.5, waited  # the deadline, its 1 s check and a margin
        for dribbler in dribblers:
            dribbler.join(timeout=10)
            assert dribbler.answer.startswith(b"HTTP/1.1 408 "), dribbler.answer
    finally:
        for dribbler in dribblers:
            dribbler.stopped.set()
            dribbler.sock.close()
        server.stop()


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf", "nan"])
def test_a_body_deadline_that_is_not_a_positive_number_is_refused(tmp_path, value):
    run = titen(
        "serve",
        "--request-body-timeout",
        value,
        database=f"sqlite:///{tmp_path}/titen.db",
        check=False,
    )
    assert run.returncode == 2
    assert f"{value!r} is not a number of seconds above 0" in run.stderr
