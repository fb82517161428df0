"""Group commit: the aggregates of commands that reach the store at once are saved together.

Each save is a transaction, and on PostgreSQL the library's recorder holds an exclusive table
lock from its insert until the commit is flushed, so one aggregate per transaction serialises
every command behind one flush. Commands that arrive while a save is under way queue here; the
first of them then saves the whole queue in one transaction (one lock, one flush) for all.

This decides nothing: races are still settled by the store's optimistic concurrency. A batch
that fails on a version conflict, or on a kept row that exists already (a stored answer,
storage/inline.py), is saved again one aggregate at a time, so only the command that lost its
race sees the failure and the others are unaffected.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError, Recording

from titen.storage.inline import KEPT, RowExists

MAX_BATCH = 64

Save = Callable[..., list[Recording[UUID]]]


@dataclass(eq=False)
class _Entry:
    aggregate: Any
    events: Sequence[Any]
    kept: Any = None
    """A row to store in the same transaction (an idempotent request's answer), or None."""
    recordings: list[Recording[UUID]] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False


class GroupCommit:
    def __init__(self, save: Save):
        """`save(*events_and_aggregates)` is the Application's save: it records the events and
        snapshots the aggregates as they fall due."""
        self._save = save
        self._changed = threading.Condition()
        self._queue: list[_Entry] = []
        self._saving = False

    def save(self, aggregate: Any, kept: Any = None) -> list[Recording[UUID]]:
        """Save an aggregate's pending events, and `kept` with them; their recordings, or
        IntegrityError on a conflict, or RowExists when `kept` was stored before."""
        entry = _Entry(aggregate, aggregate.collect_events(), kept)
        with self._changed:
            self._queue.append(entry)
        while not entry.done:
            batch = self._lead_or_wait(entry)
            if batch:
                self._save_batch(batch)
        if entry.error is not None:
            raise entry.error
        return entry.recordings

    def _lead_or_wait(self, entry: _Entry) -> list[_Entry]:
        """The batch to save when no save is under way, else wait for one to end."""
        with self._changed:
            if entry.done:
                return []
            if self._saving:
                self._changed.wait()
                return []
            self._saving = True
            return self._take()

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
        finally:
            with self._changed:
                for entry in batch:
                    entry.done = True
                self._saving = False
                self._changed.notify_all()

    def _record(self, batch: Sequence[_Entry]) -> None:
        events = [event for entry in batch for event in entry.events]
        kept = [entry.kept for entry in batch if entry.kept is not None]
        options = {KEPT: kept} if kept else {}
        recordings = self._save(*events, *(entry.aggregate for entry in batch), **options)
        for entry in batch:
            entry.recordings = [
                r for r in recordings if r.domain_event.originator_id == entry.aggregate.id
            ]

    def _record_alone(self, entry: _Entry) -> None:
        try:
            self._record([entry])
        except Exception as exc:  # its own conflict, or the store's failure: its command's alone
            entry.error = exc
