"""One log line per request with its id, route and caller; the id on every answer."""

from __future__ import annotations

import json
import logging

import pytest

from tests.support import bearer
from titen.api.rest.logs import JsonFormatter, TextFormatter

LEASE = {"resource_type": "deploy", "resource_id": "svc", "purpose": "p", "ttl_seconds": 60}


def request_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "titen.requests"]


@pytest.fixture
def logged(caplog):
    caplog.set_level(logging.INFO)
    return caplog


def test_each_answer_carries_a_new_request_id_and_one_line_logs_it(client, logged, alice):
    first = client.simulate_post("/v1/leases", json=LEASE, headers=bearer(alice))
    second = client.simulate_get("/v1/leases/lease_missing", headers=bearer(alice))
    ids = [first.headers["x-request-id"], second.headers["x-request-id"]]
    assert len(set(ids)) == 2
    lines = [r.fields for r in request_lines(logged)]
    assert [line["request_id"] for line in lines] == ids
    assert lines[0] == {
        "request_id": ids[0],
        "method": "POST",
        "route": "/v1/leases",
        "path": "/v1/leases",
        "status": 201,
        "duration_ms": lines[0]["duration_ms"],
        "organization": "acme",
        "principal": "agent_alice",
    }
    assert lines[1]["route"] == "/v1/leases/{lease_id}"
    assert lines[1]["status"] == 404
    assert lines[0]["duration_ms"] > 0


def test_a_request_id_sent_by_the_client_is_kept(client, logged):
    result = client.simulate_get("/healthz", headers={"X-Request-Id": "lb-7f3a.42"})
    assert result.headers["x-request-id"] == "lb-7f3a.42"
    assert request_lines(logged)[-1].fields["request_id"] == "lb-7f3a.42"


@pytest.mark.parametrize("offered", ["x" * 129, "two words", "a\nforged line", ""])
def test_an_implausible_request_id_is_replaced(client, offered):
    result = client.simulate_get("/healthz", headers={"X-Request-Id": offered})
    made = result.headers["x-request-id"]
    assert made != offered
    assert len(made) == 32


def test_refusals_carry_the_id_and_never_the_key_or_body(client, logged, alice):
    unauthorized = client.simulate_get("/v1/handoffs", headers=bearer("titen_wrong"))
    assert unauthorized.status_code == 401
    assert unauthorized.headers["x-request-id"]
    unrouted = client.simulate_get("/v1/nowhere/at/all")
    assert unrouted.status_code == 404
    assert unrouted.headers["x-request-id"]
    bad = client.simulate_post(
        "/v1/leases",
        json={**LEASE, "purpose": "secret-purpose", "ttl_seconds": -1},
        headers=bearer(alice),
    )
    assert bad.status_code == 400
    lines = request_lines(logged)
    assert [r.fields["route"] for r in lines] == ["/v1/handoffs", "unmatched", "/v1/leases"]
    assert lines[0].fields["principal"] is None
    for record in lines:
        text = JsonFormatter().format(record) + TextFormatter().format(record)
        assert alice not in text and "titen_wrong" not in text
        assert "secret-purpose" not in text


def test_a_500_logs_its_traceback_with_the_id_the_client_saw(client, services, logged, alice):
    lease_id = client.simulate_post("/v1/leases", json=LEASE, headers=bearer(alice)).json["data"][
        "lease_id"
    ]
    with services.store.writing() as writer:
        writer.execute("DROP TABLE {lease_index}")  # a release looks its lease up there
    result = client.simulate_delete(f"/v1/leases/{lease_id}", headers=bearer(alice))
    assert result.status_code == 500
    request_id = result.headers["x-request-id"]
    failure = next(r for r in logged.records if r.exc_info)
    assert failure.fields == {"request_id": request_id}
    line = json.loads(JsonFormatter().format(failure))
    assert line["request_id"] == request_id
    assert line["level"] == "error"
    assert "Traceback" in line["traceback"]
    assert request_lines(logged)[-1].levelname == "ERROR"


def test_the_json_formatter_writes_one_object_with_the_fields(logged):
    record = logging.LogRecord("titen.requests", logging.INFO, __file__, 1, "GET %s", ("/x",), None)
    record.fields = {"request_id": "r1", "status": 200}
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == "GET /x"
    assert parsed["level"] == "info"
    assert parsed["time"].endswith("Z")
    assert parsed["request_id"] == "r1" and parsed["status"] == 200
    assert TextFormatter().format(record).endswith("GET /x request_id=r1 status=200")


def test_the_text_line_quotes_the_path_so_it_cannot_pass_for_fields(client, logged, alice):
    client.simulate_get('/x status=200 organization=acme "q"', headers=bearer(alice))
    (record,) = request_lines(logged)
    text = TextFormatter().format(record)
    message = text.split(" titen.requests ", 1)[1].split(" request_id=", 1)[0]
    assert message.startswith('GET "/x status=200 organization=acme %22q%22" 404 ')
    fields = text.split(" request_id=", 1)[1]
    assert 'path="/x status=200 organization=acme \\"q\\""' in fields
    assert (
        json.loads(JsonFormatter().format(record))["path"] == '/x status=200 organization=acme "q"'
    )
