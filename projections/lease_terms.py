"""Where each lease's term begins in its resource's event stream: the version of its Acquired.

The audit of one lease reads only that term's events (its Acquired, its ending, and the Acquired
after it, which names who replaced an expired term) instead of replaying every term the resource
ever had. A row is written once per Acquired and never changes. It is a projection of its own,
beside the lease directory rather than a column of it, so that a store written before it gets
every row by the start-up catch-up (a new projection starts from the beginning of the log) with
no table to alter. Like the directory it is only a pointer: what the audit reports is read from
the event store, and the events found there must be that lease's.
"""

from __future__ import annotations

from typing import Any

from titen.domain.lease import Lease
from titen.projections.projection import Projection
from titen.projections.store import ViewStore, Writer


class LeaseTerms(Projection):
    name = "lease_terms"
    tables = ("lease_terms",)

    def __init__(self, store: ViewStore):
        self.store = store

    def schema(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS {lease_terms} ("
            " lease_id TEXT PRIMARY KEY, version BIGINT NOT NULL)"
        ]

    def apply(self, writer: Writer, event: Any, position: int) -> None:
        if isinstance(event, Lease.Acquired):
            writer.execute(
                "INSERT INTO {lease_terms} VALUES (%s, %s)",
                [event.lease_id, event.originator_version],
            )

    def begins(self, lease_id: str) -> int | None:
        """The version of the lease's Acquired event in its resource's stream, if recorded."""
        rows = self.store.query("SELECT version FROM {lease_terms} WHERE lease_id = %s", [lease_id])
        return int(rows[0]["version"]) if rows else None

    def rows(self) -> list[dict[str, Any]]:
        """Every row in a stable order, for comparing with a model or a rebuild."""
        return self.store.query("SELECT * FROM {lease_terms} ORDER BY lease_id")
