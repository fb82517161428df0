"""Group commit: concurrent saves share one transaction, and a lost race stays its own."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from types import SimpleNamespace
from uuid import UUID, uuid4

import pytest
from eventsourcing.persistence import IntegrityError, OperationalError

from tests.support import eventually
from titen.storage.group_commit import FileTurn, GroupCommit


class Aggregate:
    def __init__(self, id: UUID, version: int = 0, events: int = 1):
        self.id = id
        self.version = version
        self._pending = [
            SimpleNamespace(originator_id=id, originator_version=version + n)
            for n in range(1, events + 1)
        ]

    def collect_events(self) -> list[SimpleNamespace]:
        collected, self._pending = self._pending, []
        return collected


class Store:
    """Records versions like the event store: a version that exists already is a conflict.
    The first save can be held open, so that other saves queue behind it."""

    def __init__(self, hold_first: bool = False):
        self.versions: dict[UUID, int] = {}
        self.transactions: list[list[UUID]] = []
        self.fail_with: Exception | None = None
        self.first_started = threading.Event()
        self.release_first = threading.Event()
        if not hold_first:
            self.release_first.set()
        self._lock = threading.Lock()

    def save(self, *objects: object) -> list[SimpleNamespace]:
        self.first_started.set()
        self.release_first.wait(5)
        events = [o for o in objects if isinstance(o, SimpleNamespace)]
        aggregates = [o for o in objects if isinstance(o, Aggregate)]
        assert {e.originator_id for e in events} == {a.id for a in aggregates}
        with self._lock:
            if self.fail_with is not None:
                raise self.fail_with
            if any(self.versions.get(e.originator_id, 0) >= e.originator_version for e in events):
                raise IntegrityError("version conflict")
            self.transactions.append([e.originator_id for e in events])
            for event in events:
                self.versions[event.originator_id] = event.originator_version
            return [SimpleNamespace(domain_event=e) for e in events]


def save_concurrently(commits: GroupCommit, store: Store, aggregates: list[Aggregate]) -> dict:
    """Hold a first save open while `aggregates` queue behind it, then let all go."""
    outcomes: dict[int, object] = {}

    def save(n: int, aggregate: Aggregate) -> None:
        try:
            outcomes[n] = commits.save(aggregate)
        except Exception as exc:
            outcomes[n] = exc

    first = threading.Thread(target=save, args=(-1, Aggregate(uuid4())))
    first.start()
    assert store.first_started.wait(5)
    threads = [threading.Thread(target=save, args=pair) for pair in enumerate(aggregates)]
    for thread in threads:
        thread.start()
    eventually(lambda: len(commits._queue) == len(aggregates), "every save queued")
    store.release_first.set()
    for thread in (first, *threads):
        thread.join(5)
    return outcomes


def test_saves_that_queue_behind_a_save_share_the_next_transaction():
    store = Store(hold_first=True)
    commits = GroupCommit(store.save)
    aggregates = [Aggregate(uuid4()) for _ in range(5)]
    outcomes = save_concurrently(commits, store, aggregates)
    assert len(store.transactions) == 2
    assert sorted(store.transactions[1]) == sorted(a.id for a in aggregates)
    for n, aggregate in enumerate(aggregates):
        assert [r.domain_event.originator_id for r in outcomes[n]] == [aggregate.id]


def test_each_command_of_a_batch_gets_the_recordings_of_its_own_events():
    """The batch's recordings are handed out by position: a command with three events gets
    those three, in order, whatever its neighbours made."""
    store = Store(hold_first=True)
    commits = GroupCommit(store.save)
    counts = (3, 1, 2, 1)
    aggregates = [Aggregate(uuid4(), events=count) for count in counts]
    outcomes = save_concurrently(commits, store, aggregates)
    assert len(store.transactions) == 2
    for n, (aggregate, count) in enumerate(zip(aggregates, counts, strict=True)):
        assert [
            (r.domain_event.originator_id, r.domain_event.originator_version) for r in outcomes[n]
        ] == [(aggregate.id, version) for version in range(1, count + 1)]


def test_a_lost_race_in_a_batch_fails_alone():
    store = Store(hold_first=True)
    stale = uuid4()
    store.versions[stale] = 1  # another command saved version 1 first
    commits = GroupCommit(store.save)
    aggregates = [Aggregate(uuid4()), Aggregate(stale), Aggregate(uuid4())]
    outcomes = save_concurrently(commits, store, aggregates)
    assert isinstance(outcomes[1], IntegrityError)
    assert [r.domain_event.originator_id for r in outcomes[0]] == [aggregates[0].id]
    assert [r.domain_event.originator_id for r in outcomes[2]] == [aggregates[2].id]


def test_two_changes_of_one_aggregate_go_to_different_transactions():
    """Both were decided on the same version: the first saves, the second conflicts."""
    store = Store(hold_first=True)
    commits = GroupCommit(store.save)
    same = uuid4()
    outcomes = save_concurrently(commits, store, [Aggregate(same), Aggregate(same)])
    assert sorted(type(o).__name__ for o in outcomes.values()) == [
        "IntegrityError",
        "list",
        "list",
    ]
    assert all(same not in t or t == [same] for t in store.transactions[1:])


def test_a_store_failure_reaches_every_command_of_the_batch():
    store = Store(hold_first=True)
    commits = GroupCommit(store.save)
    store.fail_with = OperationalError("connection lost")
    outcomes = save_concurrently(commits, store, [Aggregate(uuid4()) for _ in range(3)])
    assert all(isinstance(o, OperationalError) for o in outcomes.values())
    store.fail_with = None
    assert commits.save(Aggregate(uuid4()))  # and the next save is not stuck


def test_a_save_alone_is_not_delayed():
    store = Store()
    commits = GroupCommit(store.save)
    aggregate = Aggregate(uuid4())
    assert [r.domain_event.originator_id for r in commits.save(aggregate)] == [aggregate.id]
    assert store.transactions == [[aggregate.id]]
    with pytest.raises(IntegrityError):
        commits.save(Aggregate(aggregate.id))


def test_a_save_alone_runs_on_its_own_thread():
    """No other thread is involved (woken, handed the work) when nobody else is saving."""
    savers: list[int] = []
    store = Store()

    def save(*objects: object) -> list[SimpleNamespace]:
        savers.append(threading.get_ident())
        return store.save(*objects)

    commits = GroupCommit(save)
    for _ in range(3):
        commits.save(Aggregate(uuid4()))
    assert savers == [threading.get_ident()] * 3


def test_many_threads_saving_at_once_all_finish_with_their_own_recordings():
    """The lead passes from batch to batch without a lost wake-up: every save returns."""
    store = Store()
    commits = GroupCommit(store.save)
    results: dict[UUID, list] = {}

    def saver() -> None:
        for _ in range(50):
            aggregate = Aggregate(uuid4())
            results[aggregate.id] = commits.save(aggregate)

    threads = [threading.Thread(target=saver) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert len(results) == 16 * 50
    assert all([r.domain_event.originator_id for r in got] == [id] for id, got in results.items())
    assert sum(len(t) for t in store.transactions) == 16 * 50
    assert not commits._queue and not commits._saving


HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


class HeldTurn:
    """The turn's file locked by another process, until `give` (or its death)."""

    def __init__(self, path: str):
        self.path = path
        self.child = subprocess.Popen(
            [sys.executable, "-c", HOLD, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.child.stdout is not None and self.child.stdin is not None
        assert self.child.stdout.readline() == b"held\n"

    def give(self) -> None:
        assert self.child.stdin is not None
        self.child.stdin.close()
        self.child.wait(5)

    def free(self) -> bool:
        """Whether nobody holds the file's lock now."""
        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        return True


def test_saves_that_queue_while_the_leader_waits_for_its_turn_save_with_it(tmp_path):
    """The batch is taken once the turn is had: commands that arrive meanwhile join it."""
    store = Store()
    held = HeldTurn(str(tmp_path / "turn"))
    commits = GroupCommit(store.save, FileTurn(held.path))
    aggregates = [Aggregate(uuid4()) for _ in range(6)]
    threads = [threading.Thread(target=commits.save, args=(a,)) for a in aggregates]
    for thread in threads:
        thread.start()
    eventually(lambda: len(commits._queue) == len(aggregates), "every save queued")
    assert store.transactions == []  # none saves while another process has the turn
    held.give()
    for thread in threads:
        thread.join(5)
    assert [sorted(t) for t in store.transactions] == [sorted(a.id for a in aggregates)]
    assert held.free()  # the leader gave the turn back


def test_a_turn_whose_holder_dies_passes_on(tmp_path):
    """The kernel gives up a dead process's lock: a killed worker stops no other's saves."""
    store = Store()
    held = HeldTurn(str(tmp_path / "turn"))
    commits = GroupCommit(store.save, FileTurn(held.path))
    aggregate = Aggregate(uuid4())
    saving = threading.Thread(target=commits.save, args=(aggregate,))
    saving.start()
    eventually(lambda: commits._saving, "the save waiting for its turn")
    assert store.transactions == []
    held.child.kill()
    saving.join(5)
    assert store.transactions == [[aggregate.id]]


def test_the_threads_of_one_process_take_the_turn_one_at_a_time(tmp_path):
    """A file lock is its open file's, which every thread of a process shares: the turn also
    lets one thread hold it at a time."""
    turn = FileTurn(str(tmp_path / "turn"))
    turn.acquire()
    other = threading.Thread(target=lambda: (turn.acquire(), turn.release()))
    other.start()
    other.join(0.2)
    assert other.is_alive()  # waiting
    turn.release()
    other.join(5)
    assert not other.is_alive()
