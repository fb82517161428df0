"""An inbox page is one range scan of a recipient's index, in order: no sort, no table scan.

That is what makes reading an inbox cost what the recipient's pending handoffs cost, however
many handoffs the organization has had (bench/inbox.py measures it at volume).
"""

from __future__ import annotations

import pytest

from titen.projections.inbox import pending_query
from titen.service.bootstrap import Services

PARAMS = {False: ["acme", "agent_reviewer", 0, 51], True: ["acme", "agent_reviewer", 0, "s", 51]}
INDEXES = {False: "handoff_inbox_recipient", True: "handoff_inbox_subject"}
FILL = (
    "INSERT INTO {handoff_inbox} SELECT 'h' || n,"
    " CASE WHEN mod(n, 3) = 0 THEN 'other' ELSE 'acme' END, 'agent_sender',"
    " CASE WHEN mod(n, 2) = 1 THEN 'agent_reviewer' ELSE 'agent_' || mod(n, 30) END,"
    " CASE WHEN mod(n, 4) = 1 THEN 's' ELSE 's' || mod(n, 7) END, NULL, NULL, NULL,"
    " '2026-07-30T10:48:13.829Z', n FROM generate_series(1, 3000) AS n"
)
"""3,000 pending handoffs of two organizations, half of them to the recipient asked about."""


def plan(services: Services, by_subject: bool) -> str:
    query = pending_query(by_subject)
    with services.store.writing() as writer:
        if services.database.kind == "sqlite":
            rows = writer.fetchall("EXPLAIN QUERY PLAN " + query, PARAMS[by_subject])
            return "\n".join(row["detail"] for row in rows)
        # A near-empty table is cheapest to scan; make the planner show the path it takes at size.
        writer.execute("SET LOCAL enable_seqscan = off")
        # On an empty table every index led by the organization looks as cheap as the
        # recipient's; with statistics of a table like a real one it picks by selectivity.
        writer.execute(FILL)
        writer.execute("ANALYZE {handoff_inbox}")
        rows = writer.fetchall("EXPLAIN " + query, PARAMS[by_subject])
        return "\n".join(row["QUERY PLAN"] for row in rows)


@pytest.mark.parametrize("by_subject", [False, True])
def test_a_page_is_a_range_scan_of_the_recipient_index(services, by_subject):
    shown = plan(services, by_subject)
    assert INDEXES[by_subject] in shown, shown
    assert "Sort" not in shown and "TEMP B-TREE" not in shown, shown
    assert "Seq Scan" not in shown and "SCAN handoff_inbox" not in shown, shown


def test_postgres_vacuums_the_inbox_after_a_fixed_number_of_deletions(services):
    """A deleted row's index entry is walked by reads until VACUUM: bound it by count, not by a
    fraction of the table, so a large inbox table does not let dead entries pile up."""
    if services.database.kind != "postgres":
        pytest.skip("SQLite removes deleted rows from the index at once")
    table = services.store.sql("{handoff_inbox}")
    rows = services.store.query("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [table])
    assert sorted(rows[0]["reloptions"]) == [
        "autovacuum_vacuum_scale_factor=0",
        "autovacuum_vacuum_threshold=1000",
    ]
