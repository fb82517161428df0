"""The Handoff aggregate: one explicit transfer of work from a sender to a target principal.

Its id is the UUID inside the public `hoff_<32 hex>` id, so a handoff is found from the event
store by id alone. It begins pending (Created) and is resolved once, accepted or rejected.
Two concurrent resolves load the same version and only one can save; the other runs again,
finds it no longer pending, and is told it does not exist (resolution is single-shot).

Every event carries the organization and the parties, so a projection or a per-organization
subscriber can act on each event alone, without loading the aggregate.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from titen.domain.clock import iso
from titen.domain.errors import NotFound, NotTarget
from titen.domain.ids import HANDOFF
from titen.domain.statuses import ACCEPTED, PENDING, REJECTED

# A handoff's public fields in the spec's order: an inbox item shows these, every other view of
# one handoff (GET, resolve, audit, the event log's data) adds `resolved_at`.
FIELDS = (
    "handoff_id",
    "from_principal",
    "to_principal",
    "subject_id",
    "context_id",
    "checkpoint_id",
    "message",
    "status",
    "created_at",
)
RESOLVED_FIELDS = (*FIELDS, "resolved_at")


class Handoff(Aggregate):
    # The events are declared, not generated from the methods' names, so that type checkers
    # and editors see their fields (docs/tooling.md); their topics are those stored events carry.
    class Created(Aggregate.Created):
        """The handoff began, pending."""

        organization: str
        from_principal: str
        to_principal: str
        subject_id: str
        context_id: str | None
        checkpoint_id: str | None
        message: str | None
        created_at: datetime

    @event(Created)
    def __init__(
        self,
        id: UUID,  # the library sets the aggregate id from it; it is not an event attribute
        organization: str,
        from_principal: str,
        to_principal: str,
        subject_id: str,
        context_id: str | None,
        checkpoint_id: str | None,
        message: str | None,
        created_at: datetime,
        timestamp: datetime,  # the library's stamp on the event: created_at too
    ):
        self.organization = organization
        self.from_principal = from_principal
        self.to_principal = to_principal
        self.subject_id = subject_id
        self.context_id = context_id
        self.checkpoint_id = checkpoint_id
        self.message = message
        self.created_at = created_at
        self.status = PENDING
        self.resolved_at: datetime | None = None

    @property
    def handoff_id(self) -> str:
        return public_id(self.id)

    def visible_to(self, organization: str, principal: str) -> bool:
        """Only its sender and its target see it; to anyone else it does not exist."""
        return self.organization == organization and principal in (
            self.from_principal,
            self.to_principal,
        )

    def resolve(self, *, organization: str, by: str, accept: bool, now: datetime) -> None:
        """Accept or reject, once, as the target; only a pending handoff is found at all, and
        only by its two parties: the sender is told it is not the target (the spec's 400), anyone
        else finds nothing, as GET /v1/handoffs/{id} answers them (the handoff's existence is
        not theirs to learn)."""
        parties = (self.from_principal, self.to_principal)
        if self.organization != organization or self.status != PENDING or by not in parties:
            raise NotFound(f"No pending handoff {self.handoff_id}.")
        if by != self.to_principal:
            raise NotTarget()
        resolution = self._accept if accept else self._reject
        resolution(
            organization=self.organization,
            from_principal=self.from_principal,
            to_principal=self.to_principal,
            subject_id=self.subject_id,
            resolved_at=now,
            timestamp=now,
        )

    class Accepted(Aggregate.Event):
        """The target accepted the handoff; every event carries the organization and parties."""

        organization: str
        from_principal: str
        to_principal: str
        subject_id: str
        resolved_at: datetime

    @event(Accepted)
    def _accept(
        self,
        organization: str,
        from_principal: str,
        to_principal: str,
        subject_id: str,
        resolved_at: datetime,
        timestamp: datetime,
    ) -> None:
        self.status = ACCEPTED
        self.resolved_at = resolved_at

    class Rejected(Aggregate.Event):
        """The target rejected the handoff; every event carries the organization and parties."""

        organization: str
        from_principal: str
        to_principal: str
        subject_id: str
        resolved_at: datetime

    @event(Rejected)
    def _reject(
        self,
        organization: str,
        from_principal: str,
        to_principal: str,
        subject_id: str,
        resolved_at: datetime,
        timestamp: datetime,
    ) -> None:
        self.status = REJECTED
        self.resolved_at = resolved_at


def public_id(key: UUID) -> str:
    """The wire form of a handoff's aggregate id."""
    return HANDOFF + key.hex


RESOLUTIONS: dict[type, str] = {Handoff.Accepted: ACCEPTED, Handoff.Rejected: REJECTED}


def public_fields(source: Any, fields: tuple[str, ...] = RESOLVED_FIELDS) -> dict[str, Any]:
    """A handoff's public fields, read from anything that has them as attributes (the
    aggregate, an audit record, an inbox row), with instants in their wire form."""
    view = {name: getattr(source, name) for name in fields}
    return {name: iso(v) if isinstance(v, datetime) else v for name, v in view.items()}
