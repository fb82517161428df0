"""`titen serve --log-format`: a real server's stderr, one parseable line per request."""

from __future__ import annotations

import http.client
import json
import re
import socket

import pytest

from tests.support import Server, create_key

LEASE = {"resource_type": "deploy", "resource_id": "svc", "purpose": "p", "ttl_seconds": 60}


def call(server: Server, method: str, path: str, headers: dict, body: object = None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        payload = None if body is None else json.dumps(body)
        if payload is not None:
            headers = {**headers, "content-type": "application/json"}
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status, response.getheader("X-Request-Id")
    finally:
        conn.close()


def test_json_lines_carry_the_request_id_and_caller_and_never_the_key(database):
    server = Server(database, 2)  # stderr is a file, not a terminal: JSON by default
    key = create_key(database, "acme", "agent_alice")
    auth = {"authorization": f"Bearer {key}"}
    try:
        status, given = call(server, "POST", "/v1/leases", {**auth, "X-Request-Id": "abc-1"}, LEASE)
        assert (status, given) == (201, "abc-1")
        status, made = call(server, "GET", "/v1/leases/lease_nope", auth)
        assert status == 404 and made
        status, refused = call(server, "GET", "/v1/handoffs", {"authorization": "Bearer nope"})
        assert status == 401 and refused
    finally:
        server.stop()
    lines = [json.loads(line) for line in server.log.splitlines() if line.strip()]
    requests = {line["request_id"]: line for line in lines if line["logger"] == "titen.requests"}
    acquired = requests["abc-1"]
    assert {k: acquired[k] for k in ("level", "method", "route", "status")} == {
        "level": "info",
        "method": "POST",
        "route": "/v1/leases",
        "status": 201,
    }
    assert (acquired["organization"], acquired["principal"]) == ("acme", "agent_alice")
    assert acquired["duration_ms"] > 0 and acquired["time"].endswith("Z")
    assert requests[made]["route"] == "/v1/leases/{lease_id}"
    assert requests[refused]["status"] == 401 and requests[refused]["principal"] is None
    assert key not in server.log and "svc" not in server.log


def test_text_lines_when_asked(database):
    server = Server(database, 2, "--log-format", "text")
    try:
        call(server, "GET", "/healthz", {"X-Request-Id": "probe-9"})
    finally:
        server.stop()
    [line] = [line for line in server.log.splitlines() if "request_id=probe-9" in line]
    assert ' INFO titen.requests GET "/healthz" 200 ' in line
    assert "route=/healthz" in line


FORGING = [
    "/v1/leases/x%0A2026-01-01T00:00:00%20INFO%20titen.requests%20GET%20/healthz%20200",
    "/v1/leases/x%0D%0Aforged",
    "/v1/leases/x%C2%85forged",  # NEL
    "/v1/leases/x%E2%80%A8forged",  # LINE SEPARATOR
    "/v1/leases/x%20request_id=forged",
]


def raw_get(port: int, path: str, request_id: str) -> int:
    """A request line sent as written, percent-escapes and all."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Request-Id: {request_id}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_path_cannot_forge_a_log_line(tmp_path, log_format):
    server = Server(f"sqlite:///{tmp_path}/titen.db", 2, "--log-format", log_format)
    try:
        for n, path in enumerate(FORGING):
            assert raw_get(server.port, path, f"probe-{n}") in (401, 404)
    finally:
        server.stop()
    lines = server.log.splitlines()  # splits at every line break Unicode knows, NEL included
    for line in lines:  # each line is one whole record
        if log_format == "json":
            json.loads(line)
        else:
            assert re.match(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:,]+ [A-Z]+ titen", line), line
    for n in range(len(FORGING)):
        assert len([line for line in lines if f"probe-{n}" in line]) == 1
    if log_format == "text":  # a value that could pass for more pairs is quoted
        [spaced] = [line for line in lines if "probe-4" in line]
        assert ' path="/v1/leases/x request_id=forged" ' in spaced
        [broken] = [line for line in lines if "probe-0" in line]
        assert 'GET "/v1/leases/x\\x0a2026-01-01T00:00:00 INFO' in broken
        # The request line's path is quoted: its spaces and `=` read as no field of the line.
        assert ' GET "/v1/leases/x request_id=forged" 401 ' in spaced


def test_ids_made_by_forked_workers_never_repeat(tmp_path):
    """Ids are drawn from the process's generator, which each forked worker reseeds: two workers
    that shared their parent's state would make the same ids in the same order."""
    server = Server(f"sqlite:///{tmp_path}/titen.db", 2, "--workers", "2")
    made: list[str] = []
    try:
        while len(answering_pids(server)) < 2 and len(made) < 5000:
            made += [call(server, "GET", "/healthz", {})[1] for _ in range(100)]
    finally:
        server.stop()
    assert len(answering_pids(server)) == 2  # each worker made some of the ids
    assert len(set(made)) == len(made)
    assert all(re.fullmatch(r"[0-9a-f]{32}", request_id) for request_id in made)


def answering_pids(server: Server) -> set[int]:
    """The processes that have logged a request line so far (whole lines: the last may be
    still being written)."""
    pids = set()
    for text in server.log_so_far().splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if line["logger"] == "titen.requests":
            pids.add(line["pid"])
    return pids
