"""Rebuilding and verifying projections, safely while readers read and commands run."""

from __future__ import annotations

import threading

import pytest

from titen.projections.rebuild import RebuildInterrupted, Scratch, rebuild
from titen.service.bootstrap import Services, bootstrap


def acquire(services: Services, n: int, organization: str = "acme") -> None:
    services.app.acquire_lease(
        organization=organization,
        holder=f"agent_{n % 3}",
        resource_type="deploy",
        resource_id=f"r{n}",
        purpose="p",
        ttl_seconds=60,
    )


def tables(services: Services) -> set[str]:
    if services.database.kind == "sqlite":
        rows = services.store.query("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {row["name"] for row in rows}
    rows = services.store.query(
        "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = %s",
        [services.database.schema],
    )
    return {row["name"] for row in rows}


def test_readers_never_see_a_half_built_table(services):
    for n in range(120):
        acquire(services, n)
    services.projector.catch_up()
    live = services.lease_index.rows()
    seen: set[int] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.add(len(services.lease_index.rows()))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        # Small batches: many commits while the scratch copy fills, any of which a reader of an
        # in-place rebuild would have seen half-done.
        for _ in range(3):
            rebuild(services.app, services.store, services.projector.projections["lease_index"], 7)
    finally:
        done.set()
        reader.join()
    assert seen == {120}
    assert services.lease_index.rows() == live
    assert not any(name.endswith("__rebuild") for name in tables(services))


def test_a_rebuild_while_commands_and_catch_ups_run_applies_every_event_once(services):
    for n in range(60):
        acquire(services, n)
    other = bootstrap(services.database.url, services.clock, pool_size=4)  # another process
    stop = threading.Event()
    failures: list[BaseException] = []

    def command_loop(owner: Services, start: int) -> None:
        n = start
        try:
            while not stop.is_set():
                acquire(owner, n)
                owner.projector.catch_up()
                n += 2
        except BaseException as exc:
            failures.append(exc)

    writers = [
        threading.Thread(target=command_loop, args=(services, 1000)),
        threading.Thread(target=command_loop, args=(other, 1001)),
    ]
    for thread in writers:
        thread.start()
    try:
        for name in services.projector.projections:
            services.projector.rebuild(name)
    finally:
        stop.set()
        for thread in writers:
            thread.join()
        other.close()
    assert failures == []
    services.projector.catch_up()
    events = services.app.recorder.max_notification_id()
    for name in services.projector.projections:
        assert services.store.max_tracking_id(name) == events
        assert services.projector.verify(name) is None, name
    assert len(services.lease_index.rows()) == len(services.lease_directory.rows())


def test_verify_names_the_first_difference_and_rebuild_repairs_it(services):
    for n in range(5):
        acquire(services, n)
    services.projector.catch_up()
    assert services.projector.verify("lease_index") is None
    r1 = services.store.query("SELECT lease_id FROM {lease_index} WHERE resource_id = 'r1'")
    r2 = services.store.query("SELECT lease_id FROM {lease_index} WHERE resource_id = 'r2'")
    with services.store.writing() as writer:
        writer.execute("DELETE FROM {lease_index} WHERE resource_id = 'r2'")
        writer.execute("UPDATE {lease_index} SET holder = 'agent_mallory' WHERE resource_id = 'r1'")

    difference = services.projector.verify("lease_index")
    assert difference is not None
    first = min(r1[0]["lease_id"], r2[0]["lease_id"])
    assert difference.table == "lease_index"
    assert (difference.live or difference.rebuilt or {})["lease_id"] == first
    if first == r1[0]["lease_id"]:
        assert difference.live["holder"] == "agent_mallory"
        assert difference.rebuilt["holder"] == "agent_1"
    else:
        assert difference.live is None
    assert "lease_index at log position 10" in str(difference)

    services.projector.rebuild("lease_index")
    assert services.projector.verify("lease_index") is None


def test_verify_reports_a_row_only_live_has(services):
    acquire(services, 1)
    services.projector.catch_up()
    with services.store.writing() as writer:
        writer.execute(
            "INSERT INTO {lease_directory} VALUES ('lease_forged', 'ff', 'acme')",
        )
    difference = services.projector.verify("lease_directory")
    assert difference is not None and difference.rebuilt is None
    assert "live has a row the log does not give" in str(difference)
    assert "lease_forged" in str(difference)


def test_a_rebuild_left_behind_is_cleared_and_two_rebuilds_cannot_interleave(services):
    for n in range(10):
        acquire(services, n)
    projection = services.projector.projections["lease_index"]
    first = Scratch(services.app, services.store, projection, batch=3)
    first.create()
    first.fill(until=6)  # then, say, the process died
    assert "lease_index__rebuild" in tables(services)

    second = Scratch(services.app, services.store, projection, batch=3)
    second.create()
    with pytest.raises(RebuildInterrupted):
        first.fill()
    second.fill()
    second.swap()
    assert "lease_index__rebuild" not in tables(services)
    assert services.projector.verify("lease_index") is None
