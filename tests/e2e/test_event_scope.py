"""Who reads what of the log, against a real server on both backends: an agent reads only the
events it is party to, on pull, stream, ticket and webhook; a dispatcher and an operator read
every event of their organization; a dispatcher acts on nobody else's lease or handoff."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.receiver import Receiver
from tests.support import EventStreamReader, Http, Server, create_key

ACQUIRE = {"resource_type": "deploy", "resource_id": "r", "purpose": "p", "ttl_seconds": 60}
PRINCIPALS = {
    "agent_a": "agent",
    "agent_b": "agent",
    "agent_c": "agent",
    "dispatch": "dispatcher",
    "ops": "operator",
}

pytestmark = pytest.mark.server("--allow-private-webhooks")


@pytest.fixture
def receivers() -> Iterator[dict[str, Receiver]]:
    made = {name: Receiver() for name in ("agent_c", "dispatch")}
    yield made
    for receiver in made.values():
        receiver.close()


def ok(answer: tuple[int, dict | None], status: int = 200) -> dict:
    code, body = answer
    assert code == status, body
    assert body is not None
    return body["data"]


def subjects(events: list[dict]) -> list[tuple[str, str]]:
    return [(e["type"], e["subject"]) for e in events]


def test_an_agent_reads_only_what_it_is_party_to_and_a_dispatcher_reads_all(
    server: Server, receivers: dict[str, Receiver]
):
    keys = {p: create_key(server.database, "acme", p, role) for p, role in PRINCIPALS.items()}
    http = {p: Http(server.url, key) for p, key in keys.items()}
    for name, receiver in receivers.items():
        ok(http[name].request("POST", "/v1/webhooks", {"url": receiver.url}), 201)
    ticket = ok(http["agent_c"].request("POST", "/v1/events/tickets"), 201)["ticket"]
    streams = {p: EventStreamReader(server.url, keys[p]) for p in ("agent_c", "dispatch", "ops")}
    try:
        lease = ok(http["agent_a"].request("POST", "/v1/leases", ACQUIRE), 201)
        handoff = ok(
            http["agent_a"].request(
                "POST",
                "/v1/handoffs",
                {"to_principal": "agent_b", "subject_id": "s", "message": "private note"},
            ),
            201,
        )
        ok(
            http["agent_b"].request(
                "POST", f"/v1/handoffs/{handoff['handoff_id']}/resolve", {"status": "accepted"}
            )
        )
        own = ok(
            http["agent_c"].request("POST", "/v1/leases", {**ACQUIRE, "resource_id": "c"}), 201
        )
        everything = [
            ("lease.acquired", lease["lease_id"]),
            ("handoff.created", handoff["handoff_id"]),
            ("handoff.accepted", handoff["handoff_id"]),
            ("lease.acquired", own["lease_id"]),
        ]
        # Pull, as each key and as agent_c's ticket.
        for reader in ("dispatch", "ops"):
            assert subjects(ok(http[reader].request("GET", "/v1/events"))["events"]) == everything
        assert (
            subjects(ok(http["agent_a"].request("GET", "/v1/events"))["events"]) == everything[:3]
        )
        assert (
            subjects(ok(http["agent_b"].request("GET", "/v1/events"))["events"]) == everything[1:3]
        )
        pulled = ok(http["agent_c"].request("GET", "/v1/events"))["events"]
        assert subjects(pulled) == everything[3:]
        by_ticket = ok(Http(server.url).request("GET", f"/v1/events?ticket={ticket}"))["events"]
        assert subjects(by_ticket) == everything[3:]
        waited = ok(
            http["agent_c"].request("GET", "/v1/events?wait=0.2&after=" + pulled[0]["cursor"])
        )
        assert waited["events"] == []
        # Streams: agent_c's first frame is its own lease, so none of the others' came before it.
        assert subjects(streams["agent_c"].events(1)) == everything[3:]
        for reader in ("dispatch", "ops"):
            assert subjects(streams[reader].events(4)) == everything
        # Webhooks deliver in log order: agent_c's first delivery is its own lease.
        delivered = receivers["dispatch"].wait_for(4)
        assert [json.loads(r.body)["subject"] for r in delivered] == [s for _, s in everything]
        first = receivers["agent_c"].wait_for(1)[0]
        assert json.loads(first.body)["subject"] == own["lease_id"]
        assert b"private note" not in b"".join(r.body for r in receivers["agent_c"].received)
    finally:
        for stream in streams.values():
            stream.close()


def test_a_dispatcher_releases_and_resolves_nothing_of_others(server: Server):
    keys = {p: create_key(server.database, "acme", p, role) for p, role in PRINCIPALS.items()}
    http = {p: Http(server.url, key) for p, key in keys.items()}
    lease = ok(http["agent_a"].request("POST", "/v1/leases", ACQUIRE), 201)
    handoff = ok(
        http["agent_a"].request(
            "POST", "/v1/handoffs", {"to_principal": "agent_b", "subject_id": "s"}
        ),
        201,
    )
    refused, _ = http["dispatch"].request("DELETE", f"/v1/leases/{lease['lease_id']}")
    assert refused == 404
    resolve = f"/v1/handoffs/{handoff['handoff_id']}/resolve"
    assert http["dispatch"].request("POST", resolve, {"status": "rejected"})[0] == 404
    assert ok(http["agent_a"].request("GET", f"/v1/leases/{lease['lease_id']}"))
    # Its own it may: a dispatcher is a principal like any other.
    mine = ok(http["dispatch"].request("POST", "/v1/leases", {**ACQUIRE, "resource_id": "d"}), 201)
    assert http["dispatch"].request("DELETE", f"/v1/leases/{mine['lease_id']}")[0] == 200
    # The operator may release any lease of its organization.
    assert http["ops"].request("DELETE", f"/v1/leases/{lease['lease_id']}")[0] == 200
    pending = ok(http["agent_b"].request("GET", "/v1/handoffs"))["handoffs"]
    assert [h["handoff_id"] for h in pending] == [handoff["handoff_id"]]
