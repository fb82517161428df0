"""The projector applies each event exactly once, also when several processes catch up at once."""

from __future__ import annotations

import threading

from tests.support import eventually
from titen.service.bootstrap import bootstrap


def acquire_many(services, count: int) -> None:
    for n in range(count):
        services.app.acquire_lease(
            organization="acme",
            holder=f"agent_{n % 7}",
            resource_type="deploy",
            resource_id=f"r{n % 7}",
            purpose="p",
            ttl_seconds=60,
        )


def test_concurrent_catch_ups_apply_each_event_once(database, clock):
    writer = bootstrap(database, clock, pool_size=4)
    readers = [bootstrap(database, clock, pool_size=4) for _ in range(3)]
    try:
        writer.app.recorder.inline = None  # as an earlier release recorded: events only
        acquire_many(writer, 60)  # nobody has applied them yet
        start = threading.Barrier(len(readers))

        def catch_up(services) -> None:
            start.wait()
            for _ in range(5):
                services.projector.catch_up()

        threads = [threading.Thread(target=catch_up, args=(r,)) for r in readers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        live = writer.lease_index.rows()
        # 7 resources, each with its latest term unreleased; supersessions removed the rest
        assert len(live) == 7
        assert (
            writer.store.max_tracking_id("lease_index") == writer.app.recorder.max_notification_id()
        )
        writer.projector.rebuild("lease_index")
        assert writer.lease_index.rows() == live
    finally:
        for services in (writer, *readers):
            services.close()


def test_a_command_is_visible_to_another_process_as_soon_as_it_answers(database, clock):
    first = bootstrap(database, clock, pool_size=4)
    second = bootstrap(database, clock, pool_size=4)
    try:
        committed = first.app.acquire_lease(
            organization="acme",
            holder="a",
            resource_type="t",
            resource_id="x",
            purpose="p",
            ttl_seconds=60,
        )
        found = second.lease_index.find(committed.value.lease_id)
        assert found is not None and found.holder == "a"
    finally:
        first.close()
        second.close()


def test_writers_creating_tracking_records_at_once_queue_instead_of_deadlocking(
    postgres_database,
):
    """Two processes starting on a new database both create the tracking records. Each
    creates them in the order given, so the second waits for the first instead of each
    holding a record the other needs (PostgreSQL would kill one of them with a deadlock)."""
    names = [f"projection_{n}" for n in range(8)]
    first = bootstrap(postgres_database, pool_size=2)
    second = bootstrap(postgres_database, pool_size=2)
    claimed: list[dict[str, int]] = []
    try:
        with first.store.writing() as writer:
            writer.claim_all(names[:1])  # created, uncommitted: the other must wait for it
            waiting = threading.Thread(
                target=lambda: claimed.append(_claim_all(second, names)), daemon=True
            )
            waiting.start()
            eventually(lambda: _lock_waits(first, postgres_database), "the second writer waiting")
            writer.claim_all(names)  # would wait for the other's records, were they out of order
        waiting.join(timeout=10)
        assert claimed == [dict.fromkeys(names, 0)]
    finally:
        first.close()
        second.close()


def _claim_all(services, names: list[str]) -> dict[str, int]:
    with services.store.writing() as writer:
        return writer.claim_all(names)


def _lock_waits(services, database: str) -> int:
    schema = database.rpartition("schema=")[2]
    rows = services.store.query(
        "SELECT COUNT(*) AS n FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND query LIKE %s",
        [f"%{schema}%"],
    )
    return rows[0]["n"]
