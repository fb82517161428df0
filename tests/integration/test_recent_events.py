"""Subscribers of one process share one read of the event log per commit."""

from __future__ import annotations

from tests.support import acquire
from titen.projections.recent_events import RecentEvents
from titen.service.bootstrap import Services


def hide_the_table(services: Services) -> None:
    with services.store.writing() as writer:
        writer.execute("ALTER TABLE {event_log} RENAME TO event_log_hidden")


def test_subscribers_read_new_rows_from_memory_filtered_by_organization(services):
    acquire(services, 0, "acme")
    recent = RecentEvents(services.event_log)
    recent.subscribe("acme")
    recent.refresh()  # holds from the log's end on
    held_from = services.event_log.last_position()
    version = recent.version("acme")
    for n in range(1, 6):
        acquire(services, n, "acme" if n % 2 else "umbra")
    recent.refresh()  # one read for all organizations
    assert recent.version("acme") != version
    expected = {org: services.event_log.read(org, held_from, (), 100) for org in ("acme", "umbra")}
    hide_the_table(services)  # from here on, only memory can answer
    assert recent.read("acme", held_from, (), 100) == expected["acme"]
    assert recent.read("umbra", held_from, (), 100) == expected["umbra"]
    assert recent.read("acme", held_from, (), 1) == expected["acme"][:1]
    assert recent.read("acme", held_from, ("handoff.created",), 100) == []
    last = expected["acme"][-1].position
    assert recent.read("acme", last, (), 100) == []


def test_a_cursor_older_than_memory_reads_the_table(services):
    for n in range(4):
        acquire(services, n, "acme")
    recent = RecentEvents(services.event_log, capacity=2)
    recent.subscribe("acme")
    recent.refresh()
    for n in range(4, 8):
        acquire(services, n, "acme")
    recent.refresh()
    assert recent.read("acme", 0, (), 100) == services.event_log.read("acme", 0, (), 100)
    assert len(recent.read("acme", 0, (), 100)) == 8


def test_nothing_is_read_while_nobody_subscribes(services):
    recent = RecentEvents(services.event_log)
    recent.subscribe("acme")
    recent.refresh()
    recent.unsubscribe("acme")
    hide_the_table(services)
    recent.refresh()  # would fail if it read
    recent.subscribe("acme")  # nothing held until the follower's next read
    version = recent.version("acme")
    # Nothing held: a local commit wakes readers of the table at once.
    recent.committed(1, frozenset({"acme"}))
    assert recent.version("acme") != version


def test_a_read_wakes_only_the_subscribers_of_organizations_it_brought_rows_of(services):
    recent = RecentEvents(services.event_log)
    recent.subscribe("acme")
    recent.subscribe("umbra")
    recent.refresh()
    acme, umbra = recent.version("acme"), recent.version("umbra")
    acquire(services, 1, "acme")
    recent.refresh()
    assert recent.version("acme") != acme
    assert recent.version("umbra") == umbra
    assert not recent.wait_past("umbra", umbra, 0.05)  # slept: nothing of its own arrived
