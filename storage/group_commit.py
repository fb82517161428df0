"""Group commit: the aggregates of commands that reach the store at once are saved together.

On PostgreSQL the recorder holds an exclusive table lock until the commit is flushed, so one
aggregate per transaction would serialise every command behind one flush. Commands arriving
during a save queue here; the first then saves the whole queue in one transaction. This decides
nothing: races are settled by optimistic concurrency, and a batch that fails on a version
conflict or an existing kept row (storage/inline.py) is saved again one aggregate at a time, so
only the command that lost its race sees the failure. On SQLite a server's workers also take
turns (`FileTurn`, a file lock the kernel passes on at once), so commands keep joining a batch
while another process saves instead of meeting at SQLite's lock, whose busy handler sleeps.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.persistence import IntegrityError, Recording

from titen.storage.inline import KEPT, RowExists

log = logging.getLogger("titen.app")

MAX_BATCH = 64

Save = Callable[..., list[Recording[UUID]]]


def _asleep() -> threading.Lock:
    """A lock taken already: its owner sleeps by acquiring it until someone releases it."""
    lock = threading.Lock()
    lock.acquire()
    return lock


class Turn(Protocol):
    """Taken by one save at a time across processes (`FileTurn`)."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...


class FileTurn:
    """A turn the processes of one server take through an exclusive `flock` of one file, each
    opening it for itself (a lock belongs to an open file, so one inherited across a fork would
    be shared). The kernel gives it up when its holder exits, however it dies; a holder that is
    frozen (SIGSTOP) holds the others' saves until it runs again, as it holds SQLite's lock."""

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._threads = threading.Lock()  # one holder in this process too: the lock is per file

    def acquire(self) -> None:
        self._threads.acquire()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._threads.release()
            raise

    def release(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def close(self) -> None:
        os.close(self._fd)


@dataclass(eq=False)
class _Entry:
    aggregate: Any
    events: Sequence[Any]
    kept: Any = None
    """A row to store in the same transaction (an idempotent request's answer), or None."""
    recordings: list[Recording[UUID]] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False
    wake: threading.Lock = field(default_factory=_asleep)
    """Released once to wake the command's thread: its batch is done, or it leads the next."""


class GroupCommit:
    """Invariant: while no save is under way the queue is empty, so a lone command finds
    nobody saving and saves on its own thread at once, with no other thread involved. Under
    contention each waiting command sleeps on a lock of its own and is woken exactly once:
    when its batch has been saved, or to save the next batch as its leader (the head of the
    queue when a save ends). No thread is woken only to find it has nothing to do.
    """

    def __init__(self, save: Save, turn: Turn | None = None):
        """`save(*events_and_aggregates)` is the Application's save: it records the events and
        snapshots the aggregates as they fall due. `turn`, if given, is shared with the other
        processes saving to the same store."""
        self._save = save
        self.turn = turn
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._saving = False

    def save(self, aggregate: Any, kept: Any = None) -> list[Recording[UUID]]:
        """Save an aggregate's pending events, and `kept` with them; their recordings, or
        IntegrityError on a conflict, or RowExists when `kept` was stored before."""
        entry = _Entry(aggregate, aggregate.collect_events(), kept)
        with self._lock:
            self._queue.append(entry)
            leads = not self._saving
            self._saving = True
        if not leads:
            entry.wake.acquire()  # until saved by another, or handed the lead
        if not entry.done:
            self._lead()
        if entry.error is not None:
            raise entry.error
        return entry.recordings

    def _lead(self) -> None:
        """Save the batch at the queue's head (this thread's own command first), then wake its
        other commands and hand the lead to the next waiting one, if any."""
        turn = self.turn
        has_turn = turn is not None and _acquire(turn)
        with self._lock:
            batch = self._take()  # after the wait: what queued meanwhile saves with it
        try:
            self._save_batch(batch)
        finally:
            if has_turn and turn is not None:
                turn.release()  # first: another process's leader may save while these wake
            with self._lock:
                leader = self._queue[0] if self._queue else None
                self._saving = leader is not None
            for entry in batch:
                entry.done = True
            for entry in batch[1:]:
                entry.wake.release()
            if leader is not None:
                leader.wake.release()

    def _take(self) -> list[_Entry]:
        """The queue's head, one entry per aggregate: a second change to the same aggregate
        was decided on the same version as the first, so it waits for the next batch and then
        fails on its own."""
        batch: list[_Entry] = []
        ids: set[UUID] = set()
        for entry in self._queue:
            if len(batch) == MAX_BATCH:
                break
            if entry.aggregate.id not in ids:
                ids.add(entry.aggregate.id)
                batch.append(entry)
        for entry in batch:
            self._queue.remove(entry)
        return batch

    def _save_batch(self, batch: list[_Entry]) -> None:
        try:
            self._record(batch)
        except (IntegrityError, RowExists) as exc:
            if len(batch) == 1:
                batch[0].error = exc
            else:
                for entry in batch:
                    self._record_alone(entry)
        except Exception as exc:  # the store failed: every command of the batch learns it
            for entry in batch:
                entry.error = exc

    def _record(self, batch: Sequence[_Entry]) -> None:
        """Save the batch; each command's recordings are the run of them its events made (the
        store answers in the order of the events it is given)."""
        events = [event for entry in batch for event in entry.events]
        kept = [entry.kept for entry in batch if entry.kept is not None]
        options = {KEPT: kept} if kept else {}
        recordings = self._save(*events, *(entry.aggregate for entry in batch), **options)
        start = 0
        for entry in batch:
            entry.recordings = recordings[start : start + len(entry.events)]
            start += len(entry.events)

    def _record_alone(self, entry: _Entry) -> None:
        try:
            self._record([entry])
        except Exception as exc:  # its own conflict, or the store's failure: its command's alone
            entry.error = exc


def _acquire(turn: Turn) -> bool:
    """Whether the turn was had; a turn that fails is logged and done without (the store's own
    lock orders the save then), so no command waits on a broken turn."""
    try:
        turn.acquire()
    except OSError:
        log.exception("the write turn failed: saving without it")
        return False
    return True
