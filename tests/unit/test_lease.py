"""The Lease aggregate's rules, without any storage."""

from datetime import UTC, datetime, timedelta
from uuid import uuid4, uuid5

import pytest

from titen.domain.errors import LeaseHeld, NotFound
from titen.domain.lease import NAMESPACE, UNKEYED, Lease, ResourceKeys, terms_begun

KEY = uuid4()
NOW = datetime(2026, 7, 30, 10, 48, 13, 829000, tzinfo=UTC)


def acquire(lease: Lease, holder: str, at: datetime = NOW, ttl: int = 600, lease_id: str = ""):
    return lease.acquire(
        lease_id=lease_id or f"lease_{holder}_{at.timestamp()}",
        holder=holder,
        purpose="smoke",
        now=at,
        ttl_seconds=ttl,
    )


def event_names(lease: Lease) -> list[str]:
    return [type(e).__name__ for e in lease.collect_events()]


KEYED = ResourceKeys(bytes(range(32)))


@pytest.mark.parametrize("keys", [KEYED, UNKEYED], ids=["keyed", "unkeyed"])
def test_id_is_the_same_for_the_same_resource_and_differs_across_organizations(keys):
    assert keys.of("acme", "deploy", "x") == keys.of("acme", "deploy", "x")
    assert keys.of("acme", "deploy", "x") != keys.of("umbra", "deploy", "x")
    assert keys.of("a", "b c", "d") != keys.of("a b", "c", "d")


def test_a_keyed_id_cannot_be_computed_from_the_name_alone():
    """Unkeyed ids are the uuid5 earlier stores have; keyed ones depend on the store's secret."""
    name = '["acme", "deploy", "x"]'
    assert UNKEYED.of("acme", "deploy", "x") == uuid5(NAMESPACE, name)
    assert KEYED.of("acme", "deploy", "x") != uuid5(NAMESPACE, name)
    other = ResourceKeys(bytes(32))
    assert other.of("acme", "deploy", "x") != KEYED.of("acme", "deploy", "x")


def test_acquire_records_a_term_that_expires_after_the_ttl():
    lease = Lease(KEY, "acme", "deploy", "checkout", timestamp=NOW)
    term = acquire(lease, "agent_a", ttl=600)
    assert term.expires_at == NOW + timedelta(seconds=600)
    assert event_names(lease) == ["Registered", "Acquired"]


def test_another_principal_is_refused_with_the_expiry_only():
    lease = Lease(KEY, "acme", "deploy", "checkout", timestamp=NOW)
    term = acquire(lease, "agent_a")
    lease.collect_events()
    with pytest.raises(LeaseHeld) as refused:
        acquire(lease, "agent_b", at=NOW + timedelta(seconds=599))
    assert refused.value.expires_at == term.expires_at
    assert event_names(lease) == []


def test_the_holder_acquiring_again_supersedes_its_term():
    lease = Lease(KEY, "acme", "deploy", "checkout", timestamp=NOW)
    acquire(lease, "agent_a", lease_id="lease_1")
    lease.collect_events()
    term = acquire(lease, "agent_a", at=NOW + timedelta(seconds=5), lease_id="lease_2")
    assert term.lease_id == "lease_2"
    assert event_names(lease) == ["Superseded", "Acquired"]


def test_anyone_acquiring_at_or_after_expiry_replaces_the_expired_term():
    lease = Lease(KEY, "acme", "deploy", "checkout", timestamp=NOW)
    acquire(lease, "agent_a", ttl=10)
    lease.collect_events()
    acquire(lease, "agent_b", at=NOW + timedelta(seconds=10))
    assert event_names(lease) == ["ReplacedAfterExpiry", "Acquired"]


def test_release_by_holder_by_operator_and_by_anyone_else():
    lease = Lease(KEY, "acme", "deploy", "checkout", timestamp=NOW)
    acquire(lease, "agent_a", lease_id="lease_1")
    with pytest.raises(NotFound):
        lease.release(lease_id="lease_1", by="agent_b", as_operator=False, now=NOW)
    with pytest.raises(NotFound):
        lease.release(lease_id="lease_other", by="agent_a", as_operator=False, now=NOW)
    lease.release(lease_id="lease_1", by="ops", as_operator=True, now=NOW)
    released = lease.collect_events()[-1]
    assert (released.released_by, released.by_operator) == ("ops", True)
    with pytest.raises(NotFound):
        lease.release(lease_id="lease_1", by="agent_a", as_operator=False, now=NOW)


def test_ttl_outside_the_contract_is_refused():
    lease = Lease(KEY, "acme", "deploy", "checkout", timestamp=NOW)
    for ttl in (9, 86_401):
        with pytest.raises(ValueError):
            acquire(lease, "agent_a", ttl=ttl)


def test_each_acquire_records_the_next_fencing_token_however_the_last_term_ended():
    lease = Lease(KEY, "acme", "deploy", "checkout", timestamp=NOW)
    tokens = [acquire(lease, "agent_a", lease_id="lease_1").fencing_token]
    tokens.append(acquire(lease, "agent_a", lease_id="lease_2", ttl=10).fencing_token)
    tokens.append(acquire(lease, "agent_b", at=NOW + timedelta(seconds=10)).fencing_token)
    lease.release(lease_id=lease.term.lease_id, by="ops", as_operator=True, now=NOW)
    tokens.append(acquire(lease, "agent_c", lease_id="lease_4").fencing_token)
    lease.release(lease_id="lease_4", by="agent_c", as_operator=False, now=NOW)
    tokens.append(acquire(lease, "agent_a").fencing_token)
    assert tokens == [1, 2, 3, 4, 5]
    acquired = [e for e in lease.collect_events() if isinstance(e, Lease.Acquired)]
    assert [(e.originator_version, e.fencing_token) for e in acquired] == [
        (2, 1),
        (4, 2),
        (6, 3),
        (8, 4),
        (10, 5),
    ]
    assert [terms_begun(version) for version in range(1, 12)] == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]


def test_holding_shows_the_current_term_to_its_holder_and_operators_only():
    lease = Lease(KEY, "acme", "deploy", "checkout", timestamp=NOW)
    acquire(lease, "agent_a", lease_id="lease_1")
    held = acquire(lease, "agent_a", lease_id="lease_2")
    assert lease.holding(lease_id="lease_2", by="agent_a", as_operator=False) == held
    assert lease.holding(lease_id="lease_2", by="ops", as_operator=True) == held
    assert (held.resource_type, held.resource_id, held.fencing_token) == ("deploy", "checkout", 2)
    for lease_id, by, as_operator in [
        ("lease_1", "agent_a", False),  # superseded
        ("lease_2", "agent_b", False),  # not the holder
        ("lease_other", "ops", True),
    ]:
        with pytest.raises(NotFound, match=f"No unreleased lease {lease_id}."):
            lease.holding(lease_id=lease_id, by=by, as_operator=as_operator)


def test_every_event_carries_the_instant_its_command_decided_at():
    """The library's own stamp (the audit's `time`) is the command's instant, not the process's
    wall clock: on PostgreSQL that instant is the database's (docs/deployment.md#clocks)."""
    lease = Lease(KEY, "acme", "deploy", "checkout", timestamp=NOW)
    acquire(lease, "agent_a", ttl=10, lease_id="lease_1")
    at = [NOW + timedelta(seconds=s) for s in (5, 20, 30)]
    acquire(lease, "agent_a", at=at[0], ttl=10, lease_id="lease_2")  # supersedes
    acquire(lease, "agent_b", at=at[1], lease_id="lease_3")  # replaces after expiry
    lease.release(lease_id="lease_3", by="agent_b", as_operator=False, now=at[2])
    stamps = [(type(e).__name__, e.timestamp) for e in lease.collect_events()]
    assert stamps == [
        ("Registered", NOW),
        ("Acquired", NOW),
        ("Superseded", at[0]),
        ("Acquired", at[0]),
        ("ReplacedAfterExpiry", at[1]),
        ("Acquired", at[1]),
        ("Released", at[2]),
    ]
