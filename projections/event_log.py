"""The public event log: each organization's committed events as CloudEvents, in log order.

Only lease.acquired and handoff.created/accepted/rejected are published (a release is recorded
on the lease's history, not published). Rows are keyed by log position and indexed by
(organization, position), so following one organization costs in proportion to its events.
The projector commits rows in position order (one batch after another, each tracked), so a
reader that resumes after the last position it saw never skips a row that commits later.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from titen.domain.clock import iso
from titen.domain.cursors import Cursors
from titen.domain.events import HANDOFF_CREATED, LEASE_ACQUIRED, event_type
from titen.domain.handoff import RESOLUTIONS, Handoff, public_fields, public_id
from titen.domain.lease import Lease
from titen.projections.projection import Projection
from titen.projections.store import ViewStore, Writer


@dataclass(frozen=True)
class Published:
    position: int
    event: dict[str, Any]
    """A CloudEvents 1.0 object; `cursor` is added when it is served."""
    cursor: str
    """Its position sealed with the store's key (not stored: the rows stay the log's)."""
    parties: frozenset[str] = frozenset()
    """The principals party to it (an agent reads only the events it is party to)."""

    def served(self) -> dict[str, Any]:
        """As GET /v1/events shows it and webhooks deliver it: with its `cursor`."""
        return {**self.event, "cursor": self.cursor}


SOURCE_PREFIX = "/titen/organizations/"
"""A CloudEvent's `source`: this, then the organization."""


class EventLog(Projection):
    name = "event_log"
    tables = ("event_log",)

    def __init__(self, store: ViewStore, cursors: Cursors):
        self.store = store
        self.cursors = cursors

    def schema(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS {event_log} ("
            " position BIGINT PRIMARY KEY, organization TEXT NOT NULL, type TEXT NOT NULL,"
            " subject TEXT NOT NULL, event TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS event_log_organization ON {event_log}"
            " (organization, position)",
            "CREATE INDEX IF NOT EXISTS event_log_subject ON {event_log} (subject)",
        ]

    def apply(self, writer: Writer, event: Any, position: int) -> None:
        if isinstance(event, Lease.Acquired):
            self._publish(
                writer,
                position,
                event,
                LEASE_ACQUIRED,
                event.lease_id,
                event.acquired_at,
                _lease_data(event),
            )
        elif isinstance(event, Handoff.Created):
            handoff_id = public_id(event.originator_id)
            self._publish(
                writer,
                position,
                event,
                HANDOFF_CREATED,
                handoff_id,
                event.created_at,
                public_fields(event.mutate(None)),
            )
        elif isinstance(event, Handoff.Accepted | Handoff.Rejected):
            handoff_id = public_id(event.originator_id)
            created = writer.fetchall(
                "SELECT event FROM {event_log} WHERE subject = %s AND type = %s",
                [handoff_id, HANDOFF_CREATED],
            )
            data = json.loads(created[0]["event"])["data"]
            data.update(status=RESOLUTIONS[type(event)], resolved_at=iso(event.resolved_at))
            self._publish(
                writer,
                position,
                event,
                event_type(event),
                handoff_id,
                event.resolved_at,
                data,
            )

    def _publish(
        self,
        writer: Writer,
        position: int,
        event: Any,
        kind: str,
        subject: str,
        time: datetime,
        data: dict[str, Any],
    ) -> None:
        cloud_event = {
            "specversion": "1.0",
            "id": f"{event.originator_id.hex}-{event.originator_version}",
            "source": SOURCE_PREFIX + event.organization,
            "type": kind,
            "time": iso(time),
            "subject": subject,
            "datacontenttype": "application/json",
            "data": data,
        }
        writer.execute(
            "INSERT INTO {event_log} VALUES (%s, %s, %s, %s, %s)",
            [position, event.organization, kind, subject, json.dumps(cloud_event)],
        )

    def read(
        self,
        organization: str,
        after: int,
        types: tuple[str, ...],
        limit: int,
        party: str | None = None,
    ) -> list[Published]:
        """The organization's events after a position, oldest first; with a `party`, only those
        it is party to, found through their parties' rows (projections/event_parties.py)."""
        if party is None:
            statement = (
                "SELECT position, event FROM {event_log} e"
                " WHERE organization = %s AND position > %s"
            )
            params: list[Any] = [organization, after]
        else:
            statement = (
                "SELECT e.position, e.event FROM {event_parties} p"
                " JOIN {event_log} e ON e.position = p.position"
                " WHERE p.organization = %s AND p.principal = %s AND p.position > %s"
            )
            params = [organization, party, after]
        if types:
            statement += f" AND e.type IN ({', '.join(['%s'] * len(types))})"
            params += types
        order = " ORDER BY position" if party is None else " ORDER BY p.position"
        rows = self.store.query(statement + order + " LIMIT %s", [*params, limit])
        return [self._published(row) for row in rows]

    def tail(self, after: int, limit: int) -> list[tuple[str, Published]]:
        """Every organization's events after a position, oldest first, with their organization."""
        rows = self.store.query(
            "SELECT position, organization, event FROM {event_log} WHERE position > %s"
            " ORDER BY position LIMIT %s",
            [after, limit],
        )
        return [(row["organization"], self._published(row)) for row in rows]

    def _published(self, row: dict[str, Any]) -> Published:
        position = row["position"]
        event = json.loads(row["event"])
        return Published(
            position, event, self.cursors.seal_event(position), _parties(event["data"])
        )

    def last_position(self) -> int:
        """The newest row's position (0 when there is none)."""
        rows = self.store.query("SELECT MAX(position) AS last FROM {event_log}")
        return rows[0]["last"] or 0

    def rows(self) -> list[dict[str, Any]]:
        """Every row in log order, for comparing a rebuild with the live table."""
        return self.store.query("SELECT * FROM {event_log} ORDER BY position")


def _parties(data: dict[str, Any]) -> frozenset[str]:
    """Who is party to a published event, from its data: a lease's holder, a handoff's sender
    and target (as projections/event_parties.py records them)."""
    if "holder" in data:
        return frozenset((data["holder"],))
    return frozenset((data["from_principal"], data["to_principal"]))


def _lease_data(event: Lease.Acquired) -> dict[str, Any]:
    """The data of a lease.acquired event, with the fields it was published with: one recorded
    before fencing tokens (Acquired version 2) keeps its published form, without the token."""
    data: dict[str, Any] = {
        "lease_id": event.lease_id,
        "resource_type": event.resource_type,
        "resource_id": event.resource_id,
        "holder": event.holder,
        "acquired_at": iso(event.acquired_at),
        "expires_at": iso(event.expires_at),
    }
    if event.fencing_token_published:
        data["fencing_token"] = event.fencing_token
    return data
