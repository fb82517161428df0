"""Audit replay: what the event log says happened to a resource's leases, or to a handoff.

Pure functions over one aggregate's domain events in recorded order: no storage, no clock. The
answers come from the log itself, never a projection, so they hold even if a read model were
wrong. `as_of` (in the service's own time: the instants the API reported) replays the longest
prefix of events all at or before it, so the answer is a state that existed even if a clock
stepped back between two commands. A resource's terms replay from any stretch of its events (a
page from after the previous page's last term, one lease's term from its own events), so the
work is bounded by what is shown, not by the length of the resource's history (docs/audit.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import takewhile
from typing import Any

from titen.domain.events import event_type
from titen.domain.handoff import Handoff
from titen.domain.lease import Lease

RELEASED = "released"
RELEASED_BY_OPERATOR = "released_by_operator"
SUPERSEDED = "superseded"
REPLACED_AFTER_EXPIRY = "replaced_after_expiry"
ENDINGS = (RELEASED, RELEASED_BY_OPERATOR, SUPERSEDED, REPLACED_AFTER_EXPIRY)
"""Every way a term can end: the audit's `ended`."""


@dataclass(frozen=True)
class Step:
    """One event of an item's history: what happened, when, and whose command it was."""

    type: str
    at: datetime
    by: str | None


@dataclass
class LeaseTerm:
    """One lease on a resource, from its acquire to how it ended (`ended` None while it has not).

    `released_at` and `released_by` are set however the term ended: `released_by` names the
    principal whose command ended it — the releaser, the holder itself when it acquired again
    (superseded), or whoever acquired after the expiry (replaced_after_expiry).
    """

    lease_id: str
    holder: str
    purpose: str
    acquired_at: datetime
    expires_at: datetime
    ttl_seconds: int
    fencing_token: int
    version: int
    """The version of its Acquired event in the resource's stream: where the term begins."""
    released_at: datetime | None = None
    released_by: str | None = None
    ended: str | None = None
    steps: list[Step] = field(default_factory=list)

    def end(self, kind: str, at: datetime, by: str | None, event_type: str) -> None:
        self.ended, self.released_at, self.released_by = kind, at, by
        self.steps.append(Step(event_type, at, by))


@dataclass(frozen=True)
class HandoffRecord:
    """A handoff as it stood (the aggregate replayed up to then) and the steps that led there."""

    handoff: Handoff
    steps: list[Step]


def instant(event: Any) -> datetime | None:
    """The service-time instant an event records, or None for one that records none."""
    if isinstance(event, Lease.Acquired):
        return event.acquired_at
    if isinstance(event, Lease.Released):
        return event.released_at
    if isinstance(event, Lease.Superseded | Lease.ReplacedAfterExpiry):
        return event.ended_at
    if isinstance(event, Handoff.Created):
        return event.created_at
    if isinstance(event, Handoff.Accepted | Handoff.Rejected):
        return event.resolved_at
    return None


def until(events: Iterable[Any], as_of: datetime | None) -> list[Any]:
    """The history as it stood at `as_of` (all of it when None)."""
    if as_of is None:
        return list(events)
    return list(takewhile(lambda e: (instant(e) or as_of) <= as_of, events))


def lease_terms(events: Iterable[Any], as_of: datetime | None = None) -> list[LeaseTerm]:
    """The terms that begin in a stretch of one Lease's events, oldest first.

    The stretch may start anywhere in the stream: what comes before its first Acquired (the
    Registered event, the ending of a term begun earlier) is skipped. A term whose ending is
    not in the stretch has not ended, as far as it tells.
    """
    replayed = until(events, as_of)
    terms: list[LeaseTerm] = []
    current: LeaseTerm | None = None
    for index, event in enumerate(replayed):
        if isinstance(event, Lease.Acquired):
            current = _begin(event)
            terms.append(current)
        elif current is None:
            continue
        elif isinstance(event, Lease.Released):
            kind = RELEASED_BY_OPERATOR if event.by_operator else RELEASED
            current.end(kind, event.released_at, event.released_by, event_type(event))
            current = None
        elif isinstance(event, Lease.Superseded):
            current.end(SUPERSEDED, event.ended_at, current.holder, event_type(event))
            current = None
        elif isinstance(event, Lease.ReplacedAfterExpiry):
            # The acquire that replaced it is the next event, recorded by the same command.
            successor = next(iter(replayed[index + 1 :]), None)
            by = successor.holder if isinstance(successor, Lease.Acquired) else None
            current.end(REPLACED_AFTER_EXPIRY, event.ended_at, by, event_type(event))
            current = None
    return terms


def handoff_history(events: Sequence[Any], as_of: datetime | None = None) -> HandoffRecord | None:
    """A handoff as it stood at `as_of`; None if the events are not a Handoff's or came later."""
    replayed = until(events, as_of)
    if not replayed or not isinstance(replayed[0], Handoff.Created):
        return None
    handoff: Handoff | None = None
    steps = []
    for event in replayed:
        handoff = event.mutate(handoff)
        if isinstance(event, Handoff.Created):
            steps.append(Step(event_type(event), event.created_at, event.from_principal))
        elif isinstance(event, Handoff.Accepted | Handoff.Rejected):
            steps.append(Step(event_type(event), event.resolved_at, event.to_principal))
    assert handoff is not None
    return HandoffRecord(handoff, steps)


def _begin(event: Any) -> LeaseTerm:
    term = LeaseTerm(
        lease_id=event.lease_id,
        holder=event.holder,
        purpose=event.purpose,
        acquired_at=event.acquired_at,
        expires_at=event.expires_at,
        ttl_seconds=event.ttl_seconds,
        fencing_token=event.fencing_token,
        version=event.originator_version,
    )
    term.steps.append(Step(event_type(event), event.acquired_at, event.holder))
    return term
