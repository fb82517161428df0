"""`titen serve --log-format`: a real server's stderr, one parseable line per request."""

from __future__ import annotations

import http.client
import json

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
    assert " INFO titen.requests GET /healthz 200 " in line
    assert "route=/healthz" in line
