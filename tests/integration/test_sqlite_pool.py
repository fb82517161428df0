"""SQLite's pool hands an idle connection over at once, and otherwise keeps the library's rules:
one writer at a time, requests that wait when none is idle, no connection from a closed pool,
connections closed at their maximum age, idle connections tried first when asked (`pre_ping`),
and reads and writes that exclude each other in memory (storage/sqlite.py, TunedSQLitePool)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import ConnectionPoolClosedError, ConnectionUnavailableError

from tests.support import eventually
from titen.storage.sqlite import TunedSQLitePool

WAIT = 10.0
"""Bounds every wait that is expected to end (a failing test fails, it does not hang)."""


def pool_of(db_name: str, **options: Any) -> TunedSQLitePool:
    return TunedSQLitePool(db_name=db_name, pool_size=2, max_overflow=1, **options)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[TunedSQLitePool]:
    opened = pool_of(str(tmp_path / "titen.db"))
    yield opened
    opened.close()


def idle(pool: TunedSQLitePool, count: int) -> list[Any]:
    """Open `count` connections and return them to the pool, idle."""
    connections = [pool.get_connection() for _ in range(count)]
    for conn in connections:
        pool.put_connection(conn)
    return connections


def test_an_idle_connection_is_handed_over_without_joining_the_queue(pool):
    [returned] = idle(pool, 1)
    assert pool._get_semaphore.acquire(timeout=WAIT)  # the queue is held: only idle ones serve
    try:
        for is_writer, readers, writers in ((None, 0, 0), (False, 1, 0), (True, 0, 1)):
            conn = pool.get_connection(timeout=0.05, is_writer=is_writer)
            assert conn is returned
            assert (pool._num_readers, pool._num_writers) == (readers, writers)
            pool.put_connection(conn)
            assert (pool._num_readers, pool._num_writers) == (0, 0)
    finally:
        pool._get_semaphore.release()


def test_a_connection_handed_over_at_once_is_in_use_until_returned(pool):
    idle(pool, 1)
    conn = pool.get_connection(is_writer=False)
    assert (pool.num_in_use, pool.num_in_pool) == (1, 0)
    other = pool.get_connection()
    assert other is not conn  # not handed out twice: another is opened
    pool.put_connection(conn)
    assert (pool.num_in_use, pool.num_in_pool) == (1, 1)
    pool.put_connection(other)


def test_a_writer_on_a_new_pool_returns_the_writers_lock(pool):
    """No connection is idle yet: the writer's lock is given back before the library's way
    takes it, else the first writer would wait for itself."""
    for _ in range(2):
        pool.put_connection(pool.get_connection(timeout=0.05, is_writer=True))


def test_a_second_writer_waits_for_the_first(pool):
    idle(pool, 2)  # a connection is idle for it: only the writer's lock stops it
    first = pool.get_connection(is_writer=True)
    with pytest.raises(ConnectionUnavailableError):
        pool.get_connection(timeout=0.05, is_writer=True)
    pool.put_connection(first)
    pool.put_connection(pool.get_connection(timeout=0.05, is_writer=True))


def test_with_no_connection_idle_a_request_waits_for_one_returned(pool):
    taken = [pool.get_connection() for _ in range(3)]  # pool_size + max_overflow
    got: list[Any] = []
    waiting = threading.Thread(target=lambda: got.append(pool.get_connection(timeout=WAIT)))
    waiting.start()
    eventually(lambda: pool._put_condition._waiters, "the request waiting", WAIT, every=0.001)  # type: ignore[attr-defined]
    returned = taken.pop()
    pool.put_connection(returned)
    waiting.join(WAIT)
    assert got == [returned]
    for conn in [*taken, *got]:
        pool.put_connection(conn)


def test_a_closed_pool_hands_out_nothing(pool):
    idle(pool, 1)
    pool.close()
    with pytest.raises(ConnectionPoolClosedError):
        pool.get_connection()


def test_a_connection_closed_at_its_maximum_age_is_not_handed_over(tmp_path):
    pool = pool_of(str(tmp_path / "titen.db"), max_age=0.01)
    try:
        [aged] = idle(pool, 1)
        eventually(lambda: aged.closed, "the aged connection closed", WAIT, every=0.005)
        conn = pool.get_connection()
        assert conn is not aged and not conn.closed
        assert pool.num_in_use == 1
        pool.put_connection(conn)
    finally:
        pool.close()


def test_with_pre_ping_an_idle_connection_is_tried_first(tmp_path):
    """Asked to (titen's pools are not), the library tries an idle connection before handing it
    over, and opens another when it fails: that way is kept."""
    pool = pool_of(str(tmp_path / "titen.db"), pre_ping=True)
    try:
        [broken] = idle(pool, 1)
        broken._sqlite_conn.close()  # behind the pool's back, as a lost connection would be
        conn = pool.get_connection()
        assert conn is not broken
        conn.cursor().execute("SELECT 1")
        pool.put_connection(conn)
    finally:
        pool.close()


def test_in_memory_a_writer_waits_for_the_readers():
    """An in-memory store's connections share one database, so the library keeps reads and
    writes apart: no request skips that by finding a connection idle."""
    pool = pool_of("file:titen?mode=memory&cache=shared")
    try:
        idle(pool, 2)  # one is idle for the writer: only the exclusion stops it
        reader = pool.get_connection(is_writer=False)
        with pytest.raises(ConnectionUnavailableError):
            pool.get_connection(timeout=0.05, is_writer=True)
        pool.put_connection(reader)
        pool.put_connection(pool.get_connection(timeout=0.05, is_writer=True))
    finally:
        pool.close()
