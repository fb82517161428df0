"""The handoff inbox: each recipient's pending handoffs, oldest first.

A row is inserted when a handoff is created and deleted when it is resolved, so the table
holds pending handoffs only. Rows are ordered by the log position of their Created event:
positions only grow as handoffs arrive, so a page that resumes after a position neither skips
nor repeats a row while others are added, and a rebuild from the log gives the same positions.
Reads use the (organization, to_principal, position) index, and the organization's listing
the (organization, position) one: their cost follows the pending handoffs read, not how many
handoffs the organization has ever had. On PostgreSQL a deleted row's index entry stays until
VACUUM, and a read walks past it, so the table is vacuumed after a fixed number of deletions
rather than a fraction of its size (when autovacuum is on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from titen.domain.clock import iso
from titen.domain.handoff import FIELDS, PENDING, Handoff, public_id
from titen.projections.projection import Projection
from titen.projections.store import SQLiteViewStore, ViewStore, Writer

RESOLUTIONS = (Handoff.Accepted, Handoff.Rejected)
VACUUM_AFTER_DELETIONS = 1000
# Every row is pending, so the status is the one public field not stored.
STORED = tuple(name for name in FIELDS if name != "status")


@dataclass(frozen=True)
class PendingHandoff:
    """An inbox item: its public fields (in the spec's order) and where it stands in the log."""

    fields: dict[str, Any]
    position: int


class Inbox(Projection):
    name = "handoff_inbox"
    tables = ("handoff_inbox",)

    def __init__(self, store: ViewStore):
        self.store = store

    def schema(self) -> list[str]:
        statements = [
            "CREATE TABLE IF NOT EXISTS {handoff_inbox} ("
            " handoff_id TEXT PRIMARY KEY, organization TEXT NOT NULL,"
            " from_principal TEXT NOT NULL, to_principal TEXT NOT NULL,"
            " subject_id TEXT NOT NULL, context_id TEXT, checkpoint_id TEXT, message TEXT,"
            " created_at TEXT NOT NULL, position BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS handoff_inbox_recipient ON {handoff_inbox}"
            " (organization, to_principal, position)",
            "CREATE INDEX IF NOT EXISTS handoff_inbox_subject ON {handoff_inbox}"
            " (organization, to_principal, subject_id, position)",
            "CREATE INDEX IF NOT EXISTS handoff_inbox_organization ON {handoff_inbox}"
            " (organization, position)",
        ]
        if not isinstance(self.store, SQLiteViewStore):  # autovacuum is PostgreSQL's
            statements.append(
                "ALTER TABLE {handoff_inbox} SET (autovacuum_vacuum_scale_factor = 0,"
                f" autovacuum_vacuum_threshold = {VACUUM_AFTER_DELETIONS})"
            )
        return statements

    def apply(self, writer: Writer, event: Any, position: int) -> None:
        if isinstance(event, Handoff.Created):
            writer.execute(
                "INSERT INTO {handoff_inbox} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    public_id(event.originator_id),
                    event.organization,
                    event.from_principal,
                    event.to_principal,
                    event.subject_id,
                    event.context_id,
                    event.checkpoint_id,
                    event.message,
                    iso(event.created_at),
                    position,
                ],
            )
        elif isinstance(event, RESOLUTIONS):
            writer.execute(
                "DELETE FROM {handoff_inbox} WHERE handoff_id = %s",
                [public_id(event.originator_id)],
            )

    def pending(
        self,
        organization: str,
        to_principal: str,
        *,
        after: int,
        limit: int,
        subject_id: str | None = None,
    ) -> list[PendingHandoff]:
        """Up to `limit` pending handoffs for the recipient whose position is after `after`."""
        params: list[Any] = [organization, to_principal, after]
        if subject_id is not None:
            params.append(subject_id)
        rows = self.store.query(pending_query(subject_id is not None), [*params, limit])
        return [_pending(row) for row in rows]

    def organization_pending(
        self, organization: str, *, after: int, limit: int, to_principal: str | None = None
    ) -> list[PendingHandoff]:
        """Up to `limit` pending handoffs of the whole organization (or to one recipient)
        whose position is after `after`, oldest first."""
        if to_principal is not None:
            return self.pending(organization, to_principal, after=after, limit=limit)
        rows = self.store.query(organization_query(), [organization, after, limit])
        return [_pending(row) for row in rows]

    def rows(self) -> list[dict[str, Any]]:
        """Every row in a stable order, for comparing a rebuild with the live table."""
        return self.store.query("SELECT * FROM {handoff_inbox} ORDER BY position")


def pending_query(by_subject: bool) -> str:
    """One page of a recipient's inbox: a range scan of one index, already in order."""
    subject = " AND subject_id = %s" if by_subject else ""
    return (
        f"SELECT {', '.join(STORED)}, position FROM {{handoff_inbox}}"
        f" WHERE organization = %s AND to_principal = %s AND position > %s{subject}"
        " ORDER BY position LIMIT %s"
    )


def organization_query() -> str:
    """One page of an organization's pending handoffs: a range scan of its index, in order."""
    return (
        f"SELECT {', '.join(STORED)}, position FROM {{handoff_inbox}}"
        " WHERE organization = %s AND position > %s ORDER BY position LIMIT %s"
    )


def _pending(row: dict[str, Any]) -> PendingHandoff:
    fields = {name: PENDING if name == "status" else row[name] for name in FIELDS}
    return PendingHandoff(fields, row["position"])
