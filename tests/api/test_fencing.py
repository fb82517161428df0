"""Fencing tokens and the holder's check (GET /v1/leases/{id}), on SQLite and on PostgreSQL."""

from __future__ import annotations

from tests.support import bearer
from titen.service.bootstrap import bootstrap

ACQUIRE = {"resource_type": "deploy", "resource_id": "checkout", "purpose": "p", "ttl_seconds": 60}
FIELDS = {
    "lease_id",
    "resource_type",
    "resource_id",
    "holder",
    "purpose",
    "acquired_at",
    "expires_at",
    "fencing_token",
    "expired",
}


def acquire(client, key, **changes) -> dict:
    result = client.simulate_post("/v1/leases", json={**ACQUIRE, **changes}, headers=bearer(key))
    assert result.status_code == 201, result.json
    return result.json["data"]


def release(client, key, lease_id: str) -> int:
    return client.simulate_delete(f"/v1/leases/{lease_id}", headers=bearer(key)).status_code


def check(client, key, lease_id: str):
    return client.simulate_get(f"/v1/leases/{lease_id}", headers=bearer(key))


def assert_not_found(client, key, lease_id: str) -> None:
    result = check(client, key, lease_id)
    assert (result.status_code, result.json) == (
        404,
        {"error": {"code": "NOT_FOUND", "message": f"No unreleased lease {lease_id}."}},
    )


def test_tokens_count_every_acquire_of_a_resource_however_the_last_term_ended(
    client, clock, alice, bob, ops
):
    tokens = [acquire(client, alice)["fencing_token"]]
    tokens.append(acquire(client, alice)["fencing_token"])  # supersedes
    clock.advance(60)
    third = acquire(client, bob)  # replaces after expiry
    tokens.append(third["fencing_token"])
    assert release(client, ops, third["lease_id"]) == 200  # operator release
    fourth = acquire(client, alice)
    tokens.append(fourth["fencing_token"])
    assert release(client, alice, fourth["lease_id"]) == 200  # holder's release
    tokens.append(acquire(client, bob)["fencing_token"])
    assert tokens == [1, 2, 3, 4, 5]


def test_tokens_are_independent_per_resource_and_per_organization(client, key, alice, bob):
    assert acquire(client, alice)["fencing_token"] == 1
    assert acquire(client, alice)["fencing_token"] == 2
    assert acquire(client, bob, resource_id="payments")["fencing_token"] == 1
    assert acquire(client, bob, resource_type="build")["fencing_token"] == 1
    assert acquire(client, key("umbra", "agent_alice"))["fencing_token"] == 1


def test_tokens_continue_from_a_snapshot(client, services, clock, alice):
    """A Lease snapshots every 100 events: after 120 acquires (240 events) there are two."""
    tokens = [acquire(client, alice)["fencing_token"] for _ in range(120)]
    assert tokens == list(range(1, 121))
    key = services.app.resource_keys.of("acme", "deploy", "checkout")
    assert [s.originator_version for s in services.app.snapshots.get(key)] == [100, 200]
    other = bootstrap(services.database.url, clock, pool_size=2)  # nothing cached: loads one
    try:
        holding = other.app.acquire_lease(
            organization="acme",
            holder="agent_alice",
            resource_type="deploy",
            resource_id="checkout",
            purpose="p",
            ttl_seconds=60,
        ).value
    finally:
        other.close()
    assert holding.fencing_token == 121


def test_the_holder_and_an_operator_see_the_current_lease(client, clock, alice, ops):
    lease = acquire(client, alice, ttl_seconds=600)
    clock.advance(1)
    for caller in (alice, ops):
        result = check(client, caller, lease["lease_id"])
        assert result.status_code == 200
        assert result.json == {
            "data": {
                "lease_id": lease["lease_id"],
                "resource_type": "deploy",
                "resource_id": "checkout",
                "holder": "agent_alice",
                "purpose": "p",
                "acquired_at": "2026-07-30T10:48:13.829Z",
                "expires_at": lease["expires_at"],
                "fencing_token": 1,
                "expired": False,
            }
        }
        assert set(result.json["data"]) == FIELDS


def test_an_expired_lease_nobody_replaced_is_shown_as_expired(client, clock, alice):
    lease = acquire(client, alice, ttl_seconds=10)
    clock.advance(9.999)
    assert check(client, alice, lease["lease_id"]).json["data"]["expired"] is False
    clock.advance(0.001)  # expiry is inclusive
    assert check(client, alice, lease["lease_id"]).json["data"]["expired"] is True


def test_a_lease_is_gone_once_released_superseded_or_replaced(client, clock, alice, bob, ops):
    released = acquire(client, alice)["lease_id"]
    assert release(client, alice, released) == 200
    by_operator = acquire(client, alice)["lease_id"]
    assert release(client, ops, by_operator) == 200
    superseded = acquire(client, alice)["lease_id"]
    replaced = acquire(client, alice, ttl_seconds=10)["lease_id"]
    clock.advance(10)
    current = acquire(client, bob)["lease_id"]
    for lease_id in (released, by_operator, superseded, replaced):
        for caller in (alice, ops):
            assert_not_found(client, caller, lease_id)
    assert check(client, bob, current).json["data"]["fencing_token"] == 5


def test_other_principals_and_organizations_find_nothing(client, key, alice, bob):
    lease_id = acquire(client, alice)["lease_id"]
    strangers = (bob, key("umbra", "agent_alice"), key("umbra", "ops", role="operator"))
    for caller in strangers:
        assert_not_found(client, caller, lease_id)
    for unknown in ("lease_" + "0" * 32, "nonsense"):
        assert_not_found(client, alice, unknown)


def test_a_lease_acquired_in_another_process_a_moment_ago_is_found(services, client, clock, alice):
    other = bootstrap(services.database.url, clock, pool_size=2)
    try:
        holding = other.app.acquire_lease(
            organization="acme",
            holder="agent_alice",
            resource_type="deploy",
            resource_id="checkout",
            purpose="p",
            ttl_seconds=60,
        ).value  # committed, not yet applied to any projection
    finally:
        other.close()
    result = check(client, alice, holding.lease_id)
    assert (result.status_code, result.json["data"]["fencing_token"]) == (200, 1)


def test_a_lease_superseded_in_another_process_is_gone_at_once(services, client, clock, alice):
    lease_id = acquire(client, alice)["lease_id"]
    other = bootstrap(services.database.url, clock, pool_size=2)
    try:
        other.app.acquire_lease(
            organization="acme",
            holder="agent_alice",
            resource_type="deploy",
            resource_id="checkout",
            purpose="p",
            ttl_seconds=60,
        )  # this process's projections have not seen it: the log answers
    finally:
        other.close()
    assert_not_found(client, alice, lease_id)
