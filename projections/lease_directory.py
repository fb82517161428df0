"""Every lease that ever began, by lease_id: which resource's event stream holds its history.

The unreleased-lease index forgets a lease when its term ends, but an audit asks about ended
leases too, and a lease_id says nothing about its resource (it is random). This directory keeps
one row per Acquired event and never deletes: a pointer only. The history itself is always read
from the event store, so a wrong or missing row can hide a lease but never invent one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from titen.domain.lease import Lease
from titen.projections.projection import Projection
from titen.projections.store import ViewStore, Writer


@dataclass(frozen=True)
class LeaseEntry:
    lease_id: str
    lease_key: UUID
    """The id of the Lease aggregate (one per resource) whose events hold this lease's term."""
    organization: str


class LeaseDirectory(Projection):
    name = "lease_directory"
    tables = ("lease_directory",)

    def __init__(self, store: ViewStore):
        self.store = store

    def schema(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS {lease_directory} ("
            " lease_id TEXT PRIMARY KEY, lease_key TEXT NOT NULL, organization TEXT NOT NULL)"
        ]

    def apply(self, writer: Writer, event: Any, position: int) -> None:
        if isinstance(event, Lease.Acquired):
            writer.execute(
                "INSERT INTO {lease_directory} VALUES (%s, %s, %s)",
                [event.lease_id, event.originator_id.hex, event.organization],
            )

    def find(self, lease_id: str) -> LeaseEntry | None:
        rows = self.store.query(
            "SELECT lease_id, lease_key, organization FROM {lease_directory} WHERE lease_id = %s",
            [lease_id],
        )
        if not rows:
            return None
        row = rows[0]
        return LeaseEntry(row["lease_id"], UUID(hex=row["lease_key"]), row["organization"])

    def rows(self) -> list[dict[str, Any]]:
        """Every row in a stable order, for comparing with a model or a rebuild."""
        return self.store.query("SELECT * FROM {lease_directory} ORDER BY lease_id")
