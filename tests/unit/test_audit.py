"""Audit replay over a Lease's and a Handoff's events, without any storage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

from titen.domain.handoff import Handoff
from titen.domain.history import (
    REPLACED_AFTER_EXPIRY,
    handoff_history,
    lease_terms,
)
from titen.domain.lease import Lease

T0 = datetime(2026, 7, 30, 10, 48, 13, 829000, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def lease_events() -> tuple[list, dict[str, str]]:
    """Five terms on one resource, ending each way there is; returns the events and the ids."""
    lease = Lease(uuid4(), "acme", "deploy", "checkout", timestamp=at(0))
    ids = {}

    def acquire(name: str, holder: str, seconds: float, ttl: int = 60) -> None:
        ids[name] = f"lease_{name}"
        lease.acquire(
            lease_id=ids[name], holder=holder, purpose=name, now=at(seconds), ttl_seconds=ttl
        )

    acquire("first", "agent_a", 0)
    acquire("second", "agent_a", 10)  # supersedes the first
    lease.release(lease_id=ids["second"], by="agent_a", as_operator=False, now=at(20))
    acquire("third", "agent_b", 30, ttl=10)
    acquire("fourth", "agent_c", 100)  # the third expired at 40: replaced after expiry
    lease.release(lease_id=ids["fourth"], by="ops", as_operator=True, now=at(110))
    acquire("fifth", "agent_a", 120)
    return list(lease.collect_events()), ids


def test_every_term_in_order_with_how_it_ended():
    events, ids = lease_events()
    terms = lease_terms(events)
    summary = [(t.lease_id, t.holder, t.ended, t.released_by, t.released_at) for t in terms]
    assert summary == [
        (ids["first"], "agent_a", "superseded", "agent_a", at(10)),
        (ids["second"], "agent_a", "released", "agent_a", at(20)),
        (ids["third"], "agent_b", REPLACED_AFTER_EXPIRY, "agent_c", at(100)),
        (ids["fourth"], "agent_c", "released_by_operator", "ops", at(110)),
        (ids["fifth"], "agent_a", None, None, None),
    ]
    assert [(t.fencing_token, t.version) for t in terms] == [
        (1, 2),
        (2, 4),
        (3, 6),
        (4, 8),
        (5, 10),
    ]
    third = terms[2]
    assert (third.expires_at, third.ttl_seconds, third.purpose) == (at(40), 10, "third")
    assert [(s.type, s.at, s.by) for s in third.steps] == [
        ("lease.acquired", at(30), "agent_b"),
        ("lease.replaced_after_expiry", at(100), "agent_c"),
    ]


def test_as_of_answers_who_held_the_resource_then():
    events, ids = lease_events()
    at_15 = lease_terms(events, as_of=at(15))
    assert [(t.lease_id, t.ended) for t in at_15] == [
        (ids["first"], "superseded"),
        (ids["second"], None),
    ]
    # an instant is inclusive: at the very millisecond of the release it has happened
    assert lease_terms(events, as_of=at(20))[-1].ended == "released"
    # the expired third term is still unreleased until someone acquires
    at_99 = lease_terms(events, as_of=at(99))
    assert at_99[-1].lease_id == ids["third"] and at_99[-1].ended is None


def test_as_of_before_the_first_acquire_has_no_terms():
    events, _ = lease_events()
    assert lease_terms(events, as_of=at(-1)) == []


def test_events_that_are_not_a_leases_have_no_terms():
    assert lease_terms([]) == []
    handoff = new_handoff()
    assert lease_terms(list(handoff.collect_events())) == []


def test_a_stretch_starting_mid_history_replays_the_terms_that_begin_in_it():
    """A page resumes after the version of the previous page's last Acquired."""
    events, ids = lease_events()
    after_first = [e for e in events if e.originator_version > 2]  # from the first's ending
    assert [(t.lease_id, t.ended) for t in lease_terms(after_first)][:2] == [
        (ids["second"], "released"),
        (ids["third"], REPLACED_AFTER_EXPIRY),
    ]
    # a stretch cut just after a replaced term's ending cannot name who replaced it
    third_only = [e for e in events if 6 <= e.originator_version <= 7]
    (third,) = lease_terms(third_only)
    assert (third.lease_id, third.ended, third.released_by) == (
        ids["third"],
        REPLACED_AFTER_EXPIRY,
        None,
    )


def new_handoff() -> Handoff:
    return Handoff(
        id=uuid4(),
        organization="acme",
        from_principal="agent_a",
        to_principal="agent_b",
        subject_id="user_rama",
        context_id=None,
        checkpoint_id="ckpt_1",
        message="over to you",
        created_at=at(0),
        timestamp=at(0),
    )


def test_a_handoff_as_created_and_as_resolved():
    handoff = new_handoff()
    handoff.resolve(organization="acme", by="agent_b", accept=False, now=at(30))
    events = list(handoff.collect_events())

    resolved = handoff_history(events)
    assert resolved is not None
    assert (resolved.handoff.status, resolved.handoff.resolved_at) == ("rejected", at(30))
    assert resolved.handoff.handoff_id == handoff.handoff_id
    assert [(s.type, s.by) for s in resolved.steps] == [
        ("handoff.created", "agent_a"),
        ("handoff.rejected", "agent_b"),
    ]

    pending = handoff_history(events, as_of=at(29))
    assert pending is not None
    assert (pending.handoff.status, pending.handoff.resolved_at, len(pending.steps)) == (
        "pending",
        None,
        1,
    )
    assert handoff_history(events, as_of=at(-1)) is None
