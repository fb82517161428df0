"""POST /v1/events/tickets: a read-only ticket for the event log, ten minutes, ended with its key;
accepted as `?ticket=` on GET /v1/events and /v1/events/stream and nowhere else."""

from __future__ import annotations

import logging
import re

from tests.support import bearer
from titen.api.rest.app import ROUTES

LEASE = {"resource_type": "deploy", "resource_id": "svc", "purpose": "p", "ttl_seconds": 60}
TICKET_ROUTES = {"/v1/events", "/v1/events/stream"}


def ticket_for(client, key: str) -> str:
    answer = client.simulate_post("/v1/events/tickets", headers=bearer(key))
    assert answer.status_code == 201, answer.text
    return answer.json["data"]["ticket"]


def events(client, ticket: str, query: str = "") -> tuple[int, dict]:
    answer = client.simulate_get(f"/v1/events?ticket={ticket}{query}")
    return answer.status_code, answer.json


def test_a_ticket_lasts_ten_minutes_and_is_never_cached(client, clock, alice):
    answer = client.simulate_post("/v1/events/tickets", headers=bearer(alice))
    assert answer.status_code == 201
    assert answer.headers["cache-control"] == "no-store"
    data = answer.json["data"]
    assert set(data) == {"ticket", "expires_at"}
    assert data["ticket"].startswith("titen_ticket_") and len(data["ticket"]) > 40
    assert data["expires_at"] == "2026-07-30T10:58:13.829Z"  # the clock's now + 10 min
    clock.advance(599)
    assert events(client, data["ticket"])[0] == 200
    clock.advance(1)
    status, body = events(client, data["ticket"])
    assert (status, body["error"]["code"]) == (401, "UNAUTHORIZED")
    assert "POST /v1/events/tickets" in body["error"]["message"]


def test_a_ticket_reads_its_keys_organization_as_its_principal(client, key, alice):
    assert client.simulate_post("/v1/leases", json=LEASE, headers=bearer(alice)).status_code == 201
    other = key("umbra", "agent_umbra")
    assert client.simulate_post("/v1/leases", json=LEASE, headers=bearer(other)).status_code == 201
    status, page = events(client, ticket_for(client, alice))
    assert status == 200
    assert [e["source"] for e in page["data"]["events"]] == ["/titen/organizations/acme"]
    status, page = events(client, ticket_for(client, other), "&types=lease.acquired")
    assert [e["data"]["holder"] for e in page["data"]["events"]] == ["agent_umbra"]


def test_a_ticket_is_a_credential_nowhere_else(client, alice, ops):
    ticket = ticket_for(client, ops)
    for template, resource in ROUTES:
        path = re.sub(r"{\w+}", "missing", template)
        for method, operation in resource.contract.items():
            if operation.public or template in TICKET_ROUTES:
                continue
            by_query = client.simulate_request(method, f"{path}?ticket={ticket}")
            assert by_query.status_code == 401, (method, path)
            as_key = client.simulate_request(method, path, headers=bearer(ticket))
            assert as_key.status_code == 401, (method, path)
    as_key = client.simulate_get("/v1/events", headers=bearer(ticket))
    assert as_key.status_code == 401  # not as a key on its own routes either
    mine = client.simulate_post("/v1/events/tickets", params={"ticket": ticket})
    assert mine.status_code == 401  # a ticket does not make tickets


def test_revoking_the_key_ends_its_tickets(client, services, alice, bob):
    alices, bobs = ticket_for(client, alice), ticket_for(client, bob)
    services.keys.revoke("acme", principal="agent_alice", key_prefix=None)
    assert events(client, alices)[0] == 401
    assert events(client, bobs)[0] == 200


def test_the_key_in_the_header_is_used_when_both_are_sent(client, alice):
    ticket = ticket_for(client, alice)
    with_key = client.simulate_get(
        "/v1/events", params={"ticket": "nonsense"}, headers=bearer(alice)
    )
    assert with_key.status_code == 200
    bad_key = client.simulate_get(
        "/v1/events", params={"ticket": ticket}, headers=bearer("titen_wrong")
    )
    assert bad_key.status_code == 401


def test_a_malformed_ticket_is_refused_and_changes_nothing(client, alice):
    ticket = ticket_for(client, alice)
    twice = client.simulate_get(f"/v1/events?ticket={ticket}&ticket={ticket}")
    assert (twice.status_code, twice.json["error"]["message"]) == (
        400,
        "ticket must be given once.",
    )
    for bad in ("", "x" * 5000, "titen_ticket_" + "0" * 48, ticket.upper()):
        assert events(client, bad)[0] == 401, bad
    assert events(client, ticket)[0] == 200


def test_the_request_log_never_holds_a_ticket(client, caplog, alice):
    caplog.set_level(logging.DEBUG)
    issued = client.simulate_post("/v1/events/tickets", headers=bearer(alice))
    ticket = issued.json["data"]["ticket"]
    events(client, ticket)
    events(client, ticket, "&types=nope")  # a 400
    events(client, ticket + "x")  # a 401
    client.simulate_get(f"/v1/leases/x?ticket={ticket}", headers=bearer(alice))
    lines = [r for r in caplog.records if r.name == "titen.requests"]
    assert len(lines) == 5
    assert lines[1].fields["principal"] == "agent_alice"  # the ticket acted as alice
    written = "\n".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records)
    assert ticket[len("titen_ticket_") :] not in written
