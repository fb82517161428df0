"""A page of the organization's held leases or pending handoffs is one range scan of an index,
in order: no sort, no table scan, whichever filter is given, so a listing costs its page (and, for
a resource type, the newer leases of other types it steps over), not the organization's size."""

from __future__ import annotations

import pytest

from titen.projections.inbox import organization_query
from titen.projections.lease_index import page_query
from titen.service.bootstrap import Services

LEASE_PAGES = [
    ([], False, "lease_index_organization"),
    ([], True, "lease_index_organization"),
    (["holder"], True, "lease_index_holder"),
    (["resource_type"], False, "lease_index_organization"),  # filtered in the scan
    (["holder", "resource_type"], True, "lease_index_holder"),
]


def plan(services: Services, query: str, params: list) -> str:
    with services.store.writing() as writer:
        if services.database.kind == "sqlite":
            rows = writer.fetchall("EXPLAIN QUERY PLAN " + query, params)
            return "\n".join(row["detail"] for row in rows)
        # A near-empty table is cheapest to scan; make the planner show the path it takes at size.
        writer.execute("SET LOCAL enable_seqscan = off")
        rows = writer.fetchall("EXPLAIN " + query, params)
        return "\n".join(row["QUERY PLAN"] for row in rows)


def one_range_scan(shown: str, index: str, table: str) -> None:
    assert index in shown, shown
    assert "Sort" not in shown and "TEMP B-TREE" not in shown, shown
    assert "Seq Scan" not in shown and f"SCAN {table}" not in shown, shown


@pytest.mark.parametrize(("filters", "resumed", "index"), LEASE_PAGES)
def test_a_page_of_held_leases_is_a_range_scan_of_one_index(services, filters, resumed, index):
    params = ["acme", *(["x"] * len(filters)), *([10] if resumed else []), 101]
    one_range_scan(
        plan(services, page_query(filters, resumed=resumed), params), index, "lease_index"
    )


def test_a_page_of_the_organizations_handoffs_is_a_range_scan_of_its_index(services):
    shown = plan(services, organization_query(), ["acme", 0, 51])
    one_range_scan(shown, "handoff_inbox_organization", "handoff_inbox")


@pytest.mark.backends("sqlite")
def test_on_sqlite_the_unreleased_leases_and_the_parties_are_stored_in_their_key_order(services):
    """WITHOUT ROWID: an acquire's row of each goes into one B-tree, not a rowid table and the
    index of its primary key."""
    for table in ("lease_index", "event_parties"):
        shapes = services.store.query("SELECT sql FROM sqlite_master WHERE name = %s", [table])
        assert shapes[0]["sql"].endswith("WITHOUT ROWID"), shapes
