"""The unreleased-lease index: every lease that has begun and not yet ended, one row each.

A release finds the resource a lease_id belongs to by its key; GET /v1/leases pages the
organization's rows newest first by the log position of each lease's Acquired, one index range
scan per page (the organization's, or a holder's: what an agent lists), and a page that resumes
before a position neither skips nor repeats a row while others are added. Rows leave when a term
ends (released, superseded, replaced after expiry); an expired but unreplaced lease stays, since
nothing sweeps and it may still be released. A table without `position` is an earlier release's
(the listing was a read model of its own then): it is dropped and applied again from the log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any
from uuid import UUID

from titen.domain.clock import iso
from titen.domain.lease import Lease
from titen.projections.projection import Projection
from titen.projections.store import ViewStore, Writer

ENDINGS = (Lease.Released, Lease.Superseded, Lease.ReplacedAfterExpiry)
COLUMNS = (
    "lease_id",
    "resource_type",
    "resource_id",
    "holder",
    "purpose",
    "acquired_at",
    "expires_at",
    "fencing_token",
)
"""The public fields of a held lease, in the order GET /v1/leases/{lease_id} shows them."""


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


FOUND = tuple(field.name for field in fields(UnreleasedLease))


@dataclass(frozen=True)
class ListedLease:
    fields: dict[str, Any]
    """COLUMNS and their values (instants as the wire writes them)."""
    position: int


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
            " acquired_at TEXT NOT NULL, expires_at TEXT NOT NULL,"
            " fencing_token BIGINT NOT NULL, position BIGINT NOT NULL){CLUSTERED}",
            "CREATE INDEX IF NOT EXISTS lease_index_organization ON {lease_index}"
            " (organization, position)",
            "CREATE INDEX IF NOT EXISTS lease_index_holder ON {lease_index}"
            " (organization, holder, position)",
        ]

    def outdated(self, columns: Callable[[str], set[str]]) -> bool:
        found = columns("lease_index")
        return bool(found) and "position" not in found

    def apply(self, writer: Writer, event: Any, position: int) -> None:
        if isinstance(event, Lease.Acquired):
            writer.execute(
                "INSERT INTO {lease_index} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
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
                    event.fencing_token,
                    position,
                ],
            )
        elif isinstance(event, ENDINGS):
            writer.execute("DELETE FROM {lease_index} WHERE lease_id = %s", [event.lease_id])

    def find(self, lease_id: str) -> UnreleasedLease | None:
        rows = self.store.query(
            f"SELECT {', '.join(FOUND)} FROM {{lease_index}} WHERE lease_id = %s", [lease_id]
        )
        if not rows:
            return None
        row = rows[0]
        row["lease_key"] = UUID(hex=row["lease_key"])
        return UnreleasedLease(**row)

    def page(
        self,
        organization: str,
        *,
        before: int | None,
        limit: int,
        holder: str | None = None,
        resource_type: str | None = None,
    ) -> list[ListedLease]:
        """Up to `limit` held leases, newest first, acquired before log position `before`
        (None: from the newest); `holder` and `resource_type` narrow it."""
        narrowed = {"holder": holder, "resource_type": resource_type}
        chosen = [column for column, value in narrowed.items() if value is not None]
        params: list[Any] = [organization, *(narrowed[column] for column in chosen)]
        if before is not None:
            params.append(before)
        rows = self.store.query(page_query(chosen, resumed=before is not None), [*params, limit])
        return [ListedLease({c: row[c] for c in COLUMNS}, row["position"]) for row in rows]

    def rows(self) -> list[dict[str, Any]]:
        """Every row in a stable order, for comparing a rebuild with the live table."""
        return self.store.query("SELECT * FROM {lease_index} ORDER BY lease_id")


def page_query(filters: list[str], *, resumed: bool) -> str:
    """One page of an organization's held leases, newest first: a range scan of one index,
    already in order (`filters`: the columns compared, of holder and resource_type)."""
    where = ["organization = %s", *(f"{column} = %s" for column in filters)]
    if resumed:
        where.append("position < %s")
    return (
        f"SELECT {', '.join(COLUMNS)}, position FROM {{lease_index}}"
        f" WHERE {' AND '.join(where)} ORDER BY position DESC LIMIT %s"
    )
