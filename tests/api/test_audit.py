"""The audit routes, replayed from the event log, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.support import bearer
from titen.service.bootstrap import bootstrap

ACQUIRE = {"resource_type": "deploy", "resource_id": "checkout", "purpose": "p", "ttl_seconds": 60}
RESOURCE = {"resource_type": "deploy", "resource_id": "checkout"}


@pytest.fixture
def umbra_ops(key):
    return key("umbra", "ops", role="operator")


def acquire(client, key, **changes) -> dict:
    result = client.simulate_post("/v1/leases", json={**ACQUIRE, **changes}, headers=bearer(key))
    assert result.status_code == 201, result.json
    return result.json["data"]


def release(client, key, lease_id: str) -> dict:
    result = client.simulate_delete(f"/v1/leases/{lease_id}", headers=bearer(key))
    assert result.status_code == 200, result.json
    return result.json["data"]


def audit(client, key, path: str, **params):
    return client.simulate_get(f"/v1/audit/{path}", params=params, headers=bearer(key))


def history(client, key, **params) -> list[dict]:
    result = audit(client, key, "leases", **RESOURCE, **params)
    assert result.status_code == 200, result.json
    return result.json["data"]["terms"]


def test_an_operator_reads_every_term_on_a_resource_and_how_each_ended(
    client, clock, alice, bob, ops
):
    first = acquire(client, alice)
    clock.advance(5)
    second = acquire(client, alice)  # supersedes the first
    clock.advance(60)
    third = acquire(client, bob)  # the second expired: replaced after expiry
    clock.advance(5)
    release(client, ops, third["lease_id"])
    clock.advance(5)
    fourth = acquire(client, alice)
    clock.advance(1)
    released = release(client, alice, fourth["lease_id"])
    clock.advance(1)
    fifth = acquire(client, bob, purpose="still going", ttl_seconds=600)

    terms = history(client, ops)
    assert [(t["lease_id"], t["holder"], t["ended"], t["released_by"]) for t in terms] == [
        (first["lease_id"], "agent_alice", "superseded", "agent_alice"),
        (second["lease_id"], "agent_alice", "replaced_after_expiry", "agent_bob"),
        (third["lease_id"], "agent_bob", "released_by_operator", "ops"),
        (fourth["lease_id"], "agent_alice", "released", "agent_alice"),
        (fifth["lease_id"], "agent_bob", None, None),
    ]
    assert terms[3]["released_at"] == released["released_at"]
    assert [t["fencing_token"] for t in terms] == [1, 2, 3, 4, 5]
    assert terms[4] == {
        "lease_id": fifth["lease_id"],
        "holder": "agent_bob",
        "purpose": "still going",
        "acquired_at": terms[4]["acquired_at"],
        "expires_at": fifth["expires_at"],
        "ttl_seconds": 600,
        "fencing_token": 5,
        "released_at": None,
        "released_by": None,
        "ended": None,
    }


def test_as_of_answers_who_held_the_resource_at_that_moment(client, clock, alice, bob, ops):
    acquire(client, alice)  # 10:48:13.829, until 10:49:13.829
    clock.advance(120)
    acquire(client, bob)  # 10:50:13.829
    at_1049 = history(client, ops, as_of="2026-07-30T10:49:00Z")
    assert [(t["holder"], t["ended"]) for t in at_1049] == [("agent_alice", None)]
    at_1052 = history(client, ops, as_of="2026-07-30T12:52:00+02:00")
    assert [(t["holder"], t["ended"]) for t in at_1052] == [
        ("agent_alice", "replaced_after_expiry"),
        ("agent_bob", None),
    ]
    assert history(client, ops, as_of="2026-07-30T10:00:00.000Z") == []
    result = audit(client, ops, "leases", **RESOURCE, as_of="2026-07-30T10:49:00Z")
    assert result.json["data"]["as_of"] == "2026-07-30T10:49:00.000Z"


def test_an_ended_lease_is_found_by_its_id_with_its_events(client, clock, alice, ops):
    lease = acquire(client, alice)
    clock.advance(3)
    released = release(client, alice, lease["lease_id"])

    result = audit(client, ops, f"leases/{lease['lease_id']}")
    assert result.status_code == 200
    data = result.json["data"]
    assert (data["resource_type"], data["resource_id"], data["ended"]) == (
        "deploy",
        "checkout",
        "released",
    )
    assert data["events"] == [
        {"type": "lease.acquired", "at": data["acquired_at"], "by": "agent_alice"},
        {"type": "lease.released", "at": released["released_at"], "by": "agent_alice"},
    ]

    before = audit(client, ops, f"leases/{lease['lease_id']}", as_of=data["acquired_at"])
    assert (before.json["data"]["ended"], len(before.json["data"]["events"])) == (None, 1)
    earlier = audit(client, ops, f"leases/{lease['lease_id']}", as_of="2026-07-30T10:00:00Z")
    assert earlier.status_code == 404


def test_a_handoff_history_as_of_before_and_after_its_resolution(client, clock, key, ops):
    sender = key("acme", "agent_sender")
    target = key("acme", "agent_target")
    created = client.simulate_post(
        "/v1/handoffs",
        json={"to_principal": "agent_target", "subject_id": "user_rama", "message": "yours"},
        headers=bearer(sender),
    ).json["data"]
    clock.advance(30)
    resolved = client.simulate_post(
        f"/v1/handoffs/{created['handoff_id']}/resolve",
        json={"status": "accepted"},
        headers=bearer(target),
    ).json["data"]

    path = f"handoffs/{created['handoff_id']}"
    now = audit(client, ops, path).json["data"]
    assert (now["status"], now["resolved_at"]) == ("accepted", resolved["resolved_at"])
    assert now["message"] == "yours"
    assert [(e["type"], e["by"]) for e in now["events"]] == [
        ("handoff.created", "agent_sender"),
        ("handoff.accepted", "agent_target"),
    ]
    then = audit(client, ops, path, as_of=now["created_at"]).json["data"]
    assert (then["status"], then["resolved_at"], len(then["events"])) == ("pending", None, 1)
    assert audit(client, ops, path, as_of="2026-07-30T10:00:00Z").status_code == 404


def test_agents_get_403_on_every_audit_route_whatever_they_ask(client, alice):
    lease = acquire(client, alice)
    for path, params in [
        ("leases", RESOURCE),
        ("leases", {}),
        (f"leases/{lease['lease_id']}", {}),
        ("leases/lease_unknown", {"as_of": "nonsense"}),
        ("handoffs/hoff_" + "0" * 32, {}),
    ]:
        result = audit(client, alice, path, **params)
        assert result.status_code == 403
        assert result.json["error"]["code"] == "FORBIDDEN"
    assert client.simulate_get("/v1/audit/leases", params=RESOURCE).status_code == 401


def test_another_organizations_items_are_not_found_and_its_resources_are_empty(
    client, key, alice, umbra_ops
):
    lease = acquire(client, alice)
    key("acme", "agent_target")
    handoff = client.simulate_post(
        "/v1/handoffs",
        json={"to_principal": "agent_target", "subject_id": "s"},
        headers=bearer(alice),
    ).json["data"]
    for path in (f"leases/{lease['lease_id']}", f"handoffs/{handoff['handoff_id']}"):
        result = audit(client, umbra_ops, path)
        assert result.status_code == 404
        assert result.json["error"]["code"] == "NOT_FOUND"
    assert history(client, umbra_ops) == []


@pytest.mark.parametrize("as_of", ["yesterday", "2026-07-30", "2026-07-30T10:52:00", ""])
def test_a_bad_as_of_is_400_on_every_route(client, alice, ops, as_of):
    lease = acquire(client, alice)
    for path, params in [
        ("leases", RESOURCE),
        (f"leases/{lease['lease_id']}", {}),
        ("handoffs/hoff_" + "0" * 32, {}),
    ]:
        result = client.simulate_get(
            f"/v1/audit/{path}",
            query_string="&".join([*(f"{k}={v}" for k, v in params.items()), f"as_of={as_of}"]),
            headers=bearer(ops),
        )
        assert result.status_code == 400, (path, result.json)
        assert result.json["error"]["code"] == "VALIDATION_ERROR"
        assert "as_of" in result.json["error"]["message"]


def test_query_parameters_are_checked(client, ops):
    missing = audit(client, ops, "leases", resource_type="deploy")
    assert (missing.status_code, missing.json["error"]["message"]) == (
        400,
        "Missing field: resource_id.",
    )
    unknown = audit(client, ops, "leases", **RESOURCE, holder="x")
    assert (unknown.status_code, unknown.json["error"]["message"]) == (
        400,
        "Unknown field: holder.",
    )
    twice = client.simulate_get(
        "/v1/audit/leases",
        query_string="resource_type=a&resource_type=b&resource_id=c",
        headers=bearer(ops),
    )
    assert (twice.status_code, twice.json["error"]["message"]) == (
        400,
        "resource_type must be given once.",
    )
    long = audit(client, ops, "leases", resource_type="x" * 201, resource_id="c")
    assert long.status_code == 400


def test_unknown_and_malformed_ids_are_404(client, ops):
    for path in (
        "leases/lease_" + "0" * 32,
        "leases/anything",
        "handoffs/hoff_" + "0" * 32,
        "handoffs/hoff_" + "A" * 32,
        "handoffs/lease_" + "0" * 32,
    ):
        assert audit(client, ops, path).status_code == 404, path


def test_a_lease_begun_in_another_process_a_moment_ago_is_found(services, client, clock, ops):
    other = bootstrap(services.database.url, clock, pool_size=2)
    try:
        term = other.app.acquire_lease(
            organization="acme",
            holder="agent_elsewhere",
            resource_type="deploy",
            resource_id="checkout",
            purpose="p",
            ttl_seconds=60,
        ).value  # committed, not yet applied to any projection
    finally:
        other.close()
    result = audit(client, ops, f"leases/{term.lease_id}")
    assert result.status_code == 200
    assert result.json["data"]["holder"] == "agent_elsewhere"
