"""The audit queries, shared by the HTTP routes and the command line.

Each reads one aggregate's events from the event store (never its snapshots), replays them with
`domain/history.py`, and answers in the wire format (instants as `iso`). Projections only find
the aggregate (the lease directory and lease_terms: a lease_id names no resource) and check a
handoff id is the caller organization's before its events are read; what is reported is always
read from the log. A page of terms reads only the events after the previous page's last term (at
most two per term, and one more), so an answer's time and memory do not grow with the history.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from eventsourcing.domain import DomainEvent

from titen.domain.clock import iso, truncate
from titen.domain.errors import NotFound
from titen.domain.events import event_type
from titen.domain.handoff import public_fields, public_id
from titen.domain.history import (
    HandoffRecord,
    LeaseTerm,
    Step,
    handoff_history,
    lease_terms,
)
from titen.domain.ids import HANDOFF, to_uuid
from titen.domain.lease import Lease
from titen.projections.lease_directory import LeaseEntry
from titen.service.application import Titen

BATCH = 500
ENVELOPE = ("originator_id", "originator_version", "timestamp")
TERM_EVENTS = 3
"""A term's Acquired, its ending, and the Acquired after it (who replaced an expired term)."""


@dataclass(frozen=True)
class TermsPage:
    """One page of a resource's terms in the wire format, and where the next page resumes."""

    data: dict[str, Any]
    resume_after: int | None
    """The version of the last term shown's Acquired; None when no term followed it."""


class Auditor:
    def __init__(
        self,
        app: Titen,
        find_lease: Callable[[str], LeaseEntry | None],
        find_term: Callable[[str], int | None],
        handoff_belongs_to: Callable[[str, str], bool],
    ):
        self.app = app
        self.find_lease = find_lease
        self.find_term = find_term
        self.handoff_belongs_to = handoff_belongs_to

    def resource(
        self,
        organization: str,
        resource_type: str,
        resource_id: str,
        as_of: datetime | None,
        *,
        after: int = 0,
        limit: int,
    ) -> TermsPage:
        """Up to `limit` terms on a resource begun after version `after`, oldest first.

        Term n's Acquired is version 2n of the resource's stream and its ending 2n + 1
        (`terms_begun`), so the 2 x limit + 2 events after `after` hold the ending of the term
        the cursor names, `limit` whole terms, and the next term's Acquired, which tells whether
        another page follows and who replaced the last term shown if it expired.
        """
        key = self.app.resource_keys.of(organization, resource_type, resource_id)
        terms = lease_terms(self.app.events.get(key, gt=after, limit=2 * limit + 2), as_of)
        shown = terms[:limit]
        data = {
            "resource_type": resource_type,
            "resource_id": resource_id,
            "as_of": _instant(as_of),
            "terms": [_term(term) for term in shown],
        }
        return TermsPage(data, shown[-1].version if len(terms) > limit else None)

    def every_term(
        self, organization: str, resource_type: str, resource_id: str, as_of: datetime | None
    ) -> dict[str, Any]:
        """The route's answer with every term on the resource, read a page at a time (for the
        command line and checks that want the whole history, never for a request)."""
        page = self.resource(organization, resource_type, resource_id, as_of, limit=BATCH)
        terms: list[dict[str, Any]] = list(page.data["terms"])
        while page.resume_after is not None:
            page = self.resource(
                organization,
                resource_type,
                resource_id,
                as_of,
                after=page.resume_after,
                limit=BATCH,
            )
            terms.extend(page.data["terms"])
        return {**page.data, "terms": terms, "next_cursor": None}

    def lease(self, organization: str, lease_id: str, as_of: datetime | None) -> dict[str, Any]:
        """One lease's term and its events; NotFound in another organization or before it."""
        missing = NotFound(f"No lease {lease_id}.")
        entry = self.find_lease(lease_id)
        if entry is None or entry.organization != organization:
            raise missing
        begins = self.find_term(lease_id)
        if begins is None:
            raise missing
        events = list(self.app.events.get(entry.lease_key, gt=begins - 1, limit=TERM_EVENTS))
        term = next(iter(lease_terms(events, as_of)), None)
        if term is None or term.lease_id != lease_id:
            raise missing
        acquired = events[0]
        assert isinstance(acquired, Lease.Acquired)  # a term begins with its Acquired
        return {
            "resource_type": acquired.resource_type,
            "resource_id": acquired.resource_id,
            "as_of": _instant(as_of),
            **_term(term),
            "events": [_step(step) for step in term.steps],
        }

    def handoff(self, organization: str, handoff_id: str, as_of: datetime | None) -> dict[str, Any]:
        """One handoff's state and events; NotFound in another organization or before it."""
        missing = NotFound(f"No handoff {handoff_id}.")
        key = to_uuid(HANDOFF, handoff_id)
        if key is None or public_id(key) != handoff_id:
            raise missing
        if not self.handoff_belongs_to(handoff_id, organization):
            raise missing  # before reading: the id may be another organization's aggregate
        record = handoff_history(list(self.app.events.get(key)), as_of)
        if record is None or record.handoff.organization != organization:
            raise missing
        return {"as_of": _instant(as_of), **_handoff(record)}

    def events(self, organization: str, since: datetime | None) -> Iterator[dict[str, Any]]:
        """Every domain event of the organization in log order, recorded at or after `since`.

        Not every event names its organization (a lease's ending names only the lease), but
        every aggregate's first event does, so the whole log is read in order and each
        aggregate's organization remembered.
        """
        owners: dict[UUID, str] = {}
        position = 0
        while batch := self.app.recorder.select_notifications(
            start=position, limit=BATCH, inclusive_of_start=False
        ):
            for notification in batch:
                # The library types it as its protocol; every event of this store is an
                # aggregate's, which has a timestamp.
                event = cast(DomainEvent, self.app.mapper.to_domain_event(notification))
                owner = owners.setdefault(
                    event.originator_id, getattr(event, "organization", None) or ""
                )
                recorded = truncate(event.timestamp)
                if owner == organization and (since is None or recorded >= since):
                    yield {
                        "position": notification.id,
                        "time": iso(recorded),
                        "aggregate": event.originator_id.hex,
                        "version": event.originator_version,
                        "type": event_type(event),
                        "payload": {
                            name: _json(value)
                            for name, value in vars(event).items()
                            if name not in ENVELOPE
                        },
                    }
            position = batch[-1].id


def _term(term: LeaseTerm) -> dict[str, Any]:
    return {
        "lease_id": term.lease_id,
        "holder": term.holder,
        "purpose": term.purpose,
        "acquired_at": iso(term.acquired_at),
        "expires_at": iso(term.expires_at),
        "ttl_seconds": term.ttl_seconds,
        "fencing_token": term.fencing_token,
        "released_at": _instant(term.released_at),
        "released_by": term.released_by,
        "ended": term.ended,
    }


def _handoff(record: HandoffRecord) -> dict[str, Any]:
    return {**public_fields(record.handoff), "events": [_step(step) for step in record.steps]}


def _step(step: Step) -> dict[str, Any]:
    return {"type": step.type, "at": iso(step.at), "by": step.by}


def _instant(instant: datetime | None) -> str | None:
    return None if instant is None else iso(instant)


def _json(value: Any) -> Any:
    """An event attribute as JSON: instants as `iso`, ids as hex, the rest as recorded."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, UUID):
        return value.hex
    return value
