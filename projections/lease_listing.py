"""The organization's held leases as a list: every unreleased lease, newest first, paged.

The unreleased-lease index answers "which resource is this lease_id" and holds neither the
fencing token nor where the lease stands in the log. This listing keeps both, so GET /v1/leases
pages by the log position of each lease's Acquired (newest first; a page that resumes before a
position neither skips nor repeats a row while others are added) with one index range scan per
page: the organization's, or a holder's (what an agent lists). Rows leave when a term ends. A
projection of its own, so a store written before it gets every row by the start-up catch-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from titen.domain.clock import iso
from titen.domain.lease import Lease
from titen.projections.lease_index import ENDINGS
from titen.projections.projection import Projection
from titen.projections.store import ViewStore, Writer

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
class ListedLease:
    fields: dict[str, Any]
    """COLUMNS and their values (instants as the wire writes them)."""
    position: int


class LeaseListing(Projection):
    name = "lease_listing"
    tables = ("lease_listing",)

    def __init__(self, store: ViewStore):
        self.store = store

    def schema(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS {lease_listing} ("
            " lease_id TEXT PRIMARY KEY, organization TEXT NOT NULL,"
            " resource_type TEXT NOT NULL, resource_id TEXT NOT NULL, holder TEXT NOT NULL,"
            " purpose TEXT NOT NULL, acquired_at TEXT NOT NULL, expires_at TEXT NOT NULL,"
            " fencing_token BIGINT NOT NULL, position BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS lease_listing_organization ON {lease_listing}"
            " (organization, position)",
            "CREATE INDEX IF NOT EXISTS lease_listing_holder ON {lease_listing}"
            " (organization, holder, position)",
        ]

    def apply(self, writer: Writer, event: Any, position: int) -> None:
        if isinstance(event, Lease.Acquired):
            writer.execute(
                "INSERT INTO {lease_listing} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    event.lease_id,
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
            writer.execute("DELETE FROM {lease_listing} WHERE lease_id = %s", [event.lease_id])

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
        return self.store.query("SELECT * FROM {lease_listing} ORDER BY position")


def page_query(filters: list[str], *, resumed: bool) -> str:
    """One page of an organization's held leases, newest first: a range scan of one index,
    already in order (`filters`: the columns compared, of holder and resource_type)."""
    where = ["organization = %s", *(f"{column} = %s" for column in filters)]
    if resumed:
        where.append("position < %s")
    return (
        f"SELECT {', '.join(COLUMNS)}, position FROM {{lease_listing}}"
        f" WHERE {' AND '.join(where)} ORDER BY position DESC LIMIT %s"
    )
