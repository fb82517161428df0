"""The unreleased-lease index: every lease that has begun and not yet ended, by lease_id.

It is how a release finds the resource a lease_id belongs to. Rows are removed when a term
ends (released, superseded, replaced after expiry); an expired but unreplaced lease stays,
since nothing sweeps and it may still be released.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from titen.domain.clock import iso
from titen.domain.lease import Lease
from titen.projections.projection import Projection
from titen.projections.store import ViewStore, Writer

ENDINGS = (Lease.Released, Lease.Superseded, Lease.ReplacedAfterExpiry)


@dataclass(frozen=True)
class UnreleasedLease:
    lease_id: str
    lease_key: UUID
    organization: str
    resource_type: str
    resource_id: str
    holder: str
    purpose: str
    acquired_at: str
    expires_at: str


class LeaseIndex(Projection):
    name = "lease_index"
    tables = ("lease_index",)

    def __init__(self, store: ViewStore):
        self.store = store

    def schema(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS {lease_index} ("
            " lease_id TEXT PRIMARY KEY, lease_key TEXT NOT NULL,"
            " organization TEXT NOT NULL, resource_type TEXT NOT NULL,"
            " resource_id TEXT NOT NULL, holder TEXT NOT NULL, purpose TEXT NOT NULL,"
            " acquired_at TEXT NOT NULL, expires_at TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS lease_index_resource ON {lease_index}"
            " (organization, resource_type, resource_id)",
        ]

    def apply(self, writer: Writer, event: Any, position: int) -> None:
        if isinstance(event, Lease.Acquired):
            writer.execute(
                "INSERT INTO {lease_index} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    event.lease_id,
                    event.originator_id.hex,
                    event.organization,
                    event.resource_type,
                    event.resource_id,
                    event.holder,
                    event.purpose,
                    iso(event.acquired_at),
                    iso(event.expires_at),
                ],
            )
        elif isinstance(event, ENDINGS):
            writer.execute("DELETE FROM {lease_index} WHERE lease_id = %s", [event.lease_id])

    def find(self, lease_id: str) -> UnreleasedLease | None:
        rows = self.store.query("SELECT * FROM {lease_index} WHERE lease_id = %s", [lease_id])
        if not rows:
            return None
        row = rows[0]
        row["lease_key"] = UUID(hex=row["lease_key"])
        return UnreleasedLease(**row)

    def rows(self) -> list[dict[str, Any]]:
        """Every row in a stable order, for comparing a rebuild with the live table."""
        return self.store.query("SELECT * FROM {lease_index} ORDER BY lease_id")
