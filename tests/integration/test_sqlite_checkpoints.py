"""SQLite's WAL checkpoints run on a thread of their own, never inside a command's commit, and
the WAL still starts over under steady writes (storage/sqlite.py, Checkpointer).

The WAL file is never shortened when SQLite starts it over, so its size is the most it has
held: 8 to 17 frames of 4 KiB per acquire here.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import acquire, eventually
from titen.service.bootstrap import Services, bootstrap
from titen.storage import sqlite as titen_sqlite

FRAME = 4096 + 24
"""A WAL frame: a page and its header."""
SQLITE_OWN_CHECKPOINT = 1000
"""Frames at which a connection left to itself checkpoints in its own commit."""
THREAD = "titen-sqlite-checkpoint"


# The `database` and `services` of tests/conftest.py, on SQLite only.
pytestmark = pytest.mark.backends("sqlite")


@pytest.fixture
def store(database: str) -> Path:
    """The SQLite file of the test's database."""
    return Path(database.removeprefix("sqlite:///"))


def wal_frames(store: Path) -> int:
    return Path(f"{store}-wal").stat().st_size // FRAME


def checkpoint_thread(services: Services) -> threading.Thread | None:
    """The store's checkpoint thread, if it has one, alive or not."""
    return services.app.recorder.datastore.pool.checkpointer._thread


def test_a_commit_never_checkpoints(services, store, monkeypatch):
    """With no checkpoint ever due, the WAL keeps every frame: no commit copied it back (one
    left to itself starts the WAL over at SQLite's 1,000 frames)."""
    monkeypatch.setattr(titen_sqlite, "CHECKPOINT_ROWS", 10**9)
    for n in range(300):
        acquire(services, n)
    assert wal_frames(store) > 2 * SQLITE_OWN_CHECKPOINT


def test_under_steady_writes_the_wal_starts_over(services, store):
    """Eight threads acquire without a pause; each checkpoint of the thread is finished by the
    next write, so the WAL starts over instead of growing by every frame written."""
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: acquire(services, n), range(1500)))
    thread = checkpoint_thread(services)
    assert thread is not None and thread.name == THREAD and thread.is_alive()
    assert wal_frames(store) < 5 * SQLITE_OWN_CHECKPOINT  # seen: 936-2,056 (no finish: 11,800)


def test_the_thread_starts_when_the_first_checkpoint_is_due_and_stops_with_the_store(store):
    opened = bootstrap(f"sqlite:///{store}", pool_size=4)
    try:
        for n in range(10):  # a dozen rows each
            acquire(opened, n)
        assert checkpoint_thread(opened) is None  # a process that commits little never has one
        for n in range(titen_sqlite.CHECKPOINT_ROWS):
            acquire(opened, 1000 + n)
        thread = checkpoint_thread(opened)
        assert thread is not None and thread.is_alive()
    finally:
        opened.close()
    assert not thread.is_alive()
    assert not Path(f"{store}-wal").exists()  # the last connection checkpointed the rest


def test_a_failed_checkpoint_is_logged_and_the_next_one_due_tries_again(services, store, caplog):
    """A read-only connection cannot checkpoint ("disk I/O error"): each failure is a warning,
    and the thread lives on to try the next."""
    acquire(services, 0)  # the store exists, in WAL mode
    checkpointer = titen_sqlite.Checkpointer(f"file:{store}?mode=ro", timeout=1)
    try:
        with caplog.at_level(logging.WARNING, "titen.app"):
            for attempt in (1, 2):
                checkpointer.committed(titen_sqlite.CHECKPOINT_ROWS)
                eventually(
                    lambda n=attempt: caplog.text.count("a WAL checkpoint failed") == n,
                    f"failure {attempt} is logged",
                )
    finally:
        checkpointer.close()


def acquires_until_a_checkpoint(workers: list[Services]) -> int:
    """Acquires, spread evenly over the stores, until one of them has a checkpoint due."""
    acquires = 0
    while not any(checkpoint_thread(worker) for worker in workers):
        acquire(workers[acquires % len(workers)], acquires)
        acquires += 1
    return acquires


def test_the_workers_of_one_server_count_their_rows_together(tmp_path):
    """Two stores open on one file, as two workers of one server, sharing their count: a
    checkpoint falls due after CHECKPOINT_ROWS rows of both together, as for one process, not
    after that many of each (which let the WAL grow with the number of workers)."""
    alone = bootstrap(f"sqlite:///{tmp_path / 'alone.db'}", pool_size=4)
    progress = titen_sqlite.shared_progress()
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    workers = [bootstrap(url, pool_size=4, checkpoints=progress) for _ in range(2)]
    try:
        one_process = acquires_until_a_checkpoint([alone])
        two_workers = acquires_until_a_checkpoint(workers)
        assert two_workers <= one_process + 2, (two_workers, one_process)  # apart: about 2x
    finally:
        alone.close()
        for worker in workers:
            worker.close()


def test_whichever_worker_writes_next_finishes_a_checkpoint(tmp_path):
    """The checkpoint runs in the worker whose commit made it due; the next write of any
    worker finishes it, so the WAL starts over although that worker may write little."""
    progress = titen_sqlite.shared_progress()
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    workers = [bootstrap(url, pool_size=4, checkpoints=progress) for _ in range(2)]
    try:
        acquires_until_a_checkpoint(workers)
        eventually(lambda: progress.restart_below != titen_sqlite.NOT_DUE, "a checkpoint ran")
        [other] = [worker for worker in workers if checkpoint_thread(worker) is None]
        for n in range(1000, 1010):
            acquire(other, n)
        assert progress.restart_below == titen_sqlite.NOT_DUE
    finally:
        for worker in workers:
            worker.close()


def test_the_progress_is_shared_with_workers_forked_after_it_is_made(tmp_path):
    progress = titen_sqlite.shared_progress()
    pid = os.fork()
    if pid == 0:  # the worker: count a commit's rows, as its saves do
        checkpointer = titen_sqlite.Checkpointer(f"file:{tmp_path / 'x.db'}", timeout=1)
        checkpointer.share(progress)
        checkpointer.committed(100)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and progress.rows == 100
