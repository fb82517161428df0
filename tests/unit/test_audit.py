"""Audit replay over a Lease's and a Handoff's events, without any storage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

from titen.domain.handoff import Handoff
from titen.domain.history import (
    REPLACED_AFTER_EXPIRY,
    handoff_history,
    resource_history,
)
from titen.domain.lease import Lease

T0 = datetime(2026, 7, 30, 10, 48, 13, 829000, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def lease_events() -> tuple[list, dict[str, str]]:
    """Five terms on one resource, ending each way there is; returns the events and the ids."""
    lease = Lease("acme", "deploy", "checkout")
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
    history = resource_history(events)
    assert history is not None
    assert (history.organization, history.resource_type, history.resource_id) == (
        "acme",
        "deploy",
        "checkout",
    )
    summary = [(t.lease_id, t.holder, t.ended, t.released_by, t.released_at) for t in history.terms]
    assert summary == [
        (ids["first"], "agent_a", "superseded", "agent_a", at(10)),
        (ids["second"], "agent_a", "released", "agent_a", at(20)),
        (ids["third"], "agent_b", REPLACED_AFTER_EXPIRY, "agent_c", at(100)),
        (ids["fourth"], "agent_c", "released_by_operator", "ops", at(110)),
        (ids["fifth"], "agent_a", None, None, None),
    ]
    assert [t.fencing_token for t in history.terms] == [1, 2, 3, 4, 5]
    third = history.term(ids["third"])
    assert third is not None
    assert (third.expires_at, third.ttl_seconds, third.purpose) == (at(40), 10, "third")
    assert [(s.type, s.at, s.by) for s in third.steps] == [
        ("lease.acquired", at(30), "agent_b"),
        ("lease.replaced_after_expiry", at(100), "agent_c"),
    ]


def test_as_of_answers_who_held_the_resource_then():
    events, ids = lease_events()
    at_15 = resource_history(events, as_of=at(15))
    assert at_15 is not None
    assert [(t.lease_id, t.ended) for t in at_15.terms] == [
        (ids["first"], "superseded"),
        (ids["second"], None),
    ]
    # an instant is inclusive: at the very millisecond of the release it has happened
    at_20 = resource_history(events, as_of=at(20))
    assert at_20 is not None and at_20.terms[-1].ended == "released"
    # the expired third term is still unreleased until someone acquires
    at_99 = resource_history(events, as_of=at(99))
    assert at_99 is not None
    assert at_99.terms[-1].lease_id == ids["third"] and at_99.terms[-1].ended is None


def test_as_of_before_the_first_acquire_has_no_terms():
    events, _ = lease_events()
    before = resource_history(events, as_of=at(-1))
    assert before is not None and before.terms == []


def test_a_history_that_is_not_a_leases_is_none():
    assert resource_history([]) is None
    handoff = new_handoff()
    assert resource_history(list(handoff.collect_events())) is None


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
