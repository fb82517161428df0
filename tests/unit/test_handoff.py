"""The Handoff aggregate's rules, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from titen.domain.errors import NotFound, NotTarget
from titen.domain.handoff import ACCEPTED, PENDING, REJECTED, Handoff, public_id

NOW = datetime(2026, 7, 30, 10, 48, 13, 829000, tzinfo=UTC)


def new_handoff() -> Handoff:
    return Handoff(
        id=uuid4(),
        organization="acme",
        from_principal="agent_sender",
        to_principal="agent_reviewer",
        subject_id="user_rama",
        context_id=None,
        checkpoint_id="ckpt_1",
        message="hi",
        created_at=NOW,
        timestamp=NOW,
    )


def test_a_new_handoff_is_pending_under_its_public_id():
    handoff = new_handoff()
    assert handoff.status == PENDING
    assert handoff.resolved_at is None
    assert handoff.handoff_id == "hoff_" + handoff.id.hex == public_id(handoff.id)
    (created,) = handoff.collect_events()
    assert isinstance(created, Handoff.Created)
    assert created.originator_id == handoff.id
    assert "id" not in vars(created)  # the id is the originator's, not a second attribute
    assert (created.organization, created.to_principal) == ("acme", "agent_reviewer")


@pytest.mark.parametrize(
    ("accept", "status", "kind"),
    [(True, ACCEPTED, Handoff.Accepted), (False, REJECTED, Handoff.Rejected)],
)
def test_the_target_resolves_and_the_event_stands_alone(accept, status, kind):
    handoff = new_handoff()
    later = NOW + timedelta(seconds=5)
    handoff.resolve(organization="acme", by="agent_reviewer", accept=accept, now=later)
    assert (handoff.status, handoff.resolved_at) == (status, later)
    resolution = handoff.collect_events()[-1]
    assert isinstance(resolution, kind)
    assert (
        resolution.organization,
        resolution.from_principal,
        resolution.to_principal,
        resolution.subject_id,
        resolution.resolved_at,
    ) == ("acme", "agent_sender", "agent_reviewer", "user_rama", later)


def test_resolution_is_single_shot():
    handoff = new_handoff()
    handoff.resolve(organization="acme", by="agent_reviewer", accept=True, now=NOW)
    for accept in (True, False):
        with pytest.raises(NotFound):
            handoff.resolve(organization="acme", by="agent_reviewer", accept=accept, now=NOW)
    assert handoff.status == ACCEPTED


def test_only_the_target_may_resolve():
    handoff = new_handoff()
    with pytest.raises(NotTarget):
        handoff.resolve(organization="acme", by="agent_sender", accept=True, now=NOW)
    with pytest.raises(NotFound):  # neither party: nothing to find, as GET answers
        handoff.resolve(organization="acme", by="agent_bystander", accept=True, now=NOW)
    assert handoff.status == PENDING
    assert len(handoff.collect_events()) == 1


def test_another_organization_finds_nothing():
    handoff = new_handoff()
    with pytest.raises(NotFound):
        handoff.resolve(organization="umbra", by="agent_reviewer", accept=True, now=NOW)
    assert handoff.status == PENDING


def test_only_sender_and_target_see_it():
    handoff = new_handoff()
    assert handoff.visible_to("acme", "agent_sender")
    assert handoff.visible_to("acme", "agent_reviewer")
    assert not handoff.visible_to("acme", "agent_bystander")
    assert not handoff.visible_to("umbra", "agent_reviewer")


def test_its_events_carry_the_instants_their_commands_decided_at():
    handoff = new_handoff()
    later = NOW + timedelta(seconds=7)
    handoff.resolve(organization="acme", by="agent_reviewer", accept=True, now=later)
    assert [e.timestamp for e in handoff.collect_events()] == [NOW, later]
