"""PostgreSQL as the event store: the library's recorder, with the read models written inline.

The library's insert runs in one transaction in pipeline mode: it takes the events table's
EXCLUSIVE lock, sends NOTIFY, inserts the events and reads back their notification ids. Right
there, before the commit and still under the lock, this recorder writes the read models
(storage/inline.py). The lock is what keeps the log gap-free for readers (docs/leases.md): no
other command can take a log position until this transaction has committed, so positions become
visible in order and a reader that resumes after the last position it saw never skips one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresFactory,
)

from titen.storage import deadlines
from titen.storage.inline import InlineRecording, ReadModelWriteFailed

C = TypeVar("C", bound=type)


def run_once(*names: str) -> Callable[[C], C]:
    """A class decorator: the named methods of the library's recorder run once, without the
    retry it wraps them in (up to 10 attempts, 0.2 s apart, on any connection error).

    Retrying made one bounded wait ten (a command waited 40 s for a pool that had no connection
    to give), and a retried insert whose first attempt had committed met its own events as a
    lost race. A failed call now fails at once, as an outage the caller answers with 503.
    """

    def decorate(cls: C) -> C:
        for name in names:
            method = getattr(cls, name)
            setattr(cls, name, getattr(method, "__wrapped__", method))
        return cls

    return decorate


class _RollBack(BaseException):
    """Carries a failed inline write past the library's `except Exception`, so it leaves the
    transaction block as an exception and the transaction rolls back.

    The library's insert catches every Exception inside its transaction block and raises it
    again only after the block has ended, which commits: an error raised by Python code (not by
    the database, whose errors abort the transaction anyway) would commit the events without
    their read-model rows.
    """

    def __init__(self, failed: ReadModelWriteFailed):
        super().__init__(str(failed))
        self.failed = failed


_insert_once = PostgresApplicationRecorder.insert_events.__wrapped__  # type: ignore[attr-defined]


@run_once("select_events")
class SnapshotRecorder(PostgresAggregateRecorder):
    """The library's recorder of snapshots, its reads not retried (see `run_once`)."""


@run_once("select_events", "select_notifications", "max_notification_id")
class InlinePostgresRecorder(InlineRecording, PostgresApplicationRecorder):
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        try:
            return _insert_once(self, stored_events, **kwargs)
        except _RollBack as rolled_back:
            raise rolled_back.failed from rolled_back.failed.__cause__

    def _fetch_ids_after_insert_events(
        self, curs: Any, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        positions = super()._fetch_ids_after_insert_events(curs, stored_events, **kwargs)
        # A nested pipeline block sends what the hook queued and waits for the results when it
        # ends, so a failing row surfaces here (as ReadModelWriteFailed), not at the commit.
        try:
            with curs.connection.pipeline():
                self.write_inline(curs, positions, kwargs)
        except ReadModelWriteFailed as failed:
            raise _RollBack(failed) from failed
        return positions


class TitenPostgresFactory(PostgresFactory):
    """The library's PostgreSQL factory with titen's recorders and its pool tuned
    (storage/deadlines.py) before any connection is opened."""

    aggregate_recorder_class = SnapshotRecorder
    application_recorder_class = InlinePostgresRecorder

    def __init__(self, env: Any):
        super().__init__(env)
        deadlines.tune(self.datastore.pool)
