"""PostgreSQL as the event store: the library's recorder, with the read models written inline.

The library's insert runs in one transaction in pipeline mode: it takes the events table's
EXCLUSIVE lock, sends NOTIFY, inserts the events and reads back their notification ids. Right
there, before the commit and still under the lock, this recorder writes the read models
(storage/inline.py). The lock is what keeps the log gap-free for readers (docs/leases.md): no
other command can take a log position until this transaction has committed, so positions become
visible in order and a reader that resumes after the last position it saw never skips one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder

from titen.storage.inline import InlineRecording, ReadModelWriteFailed


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


class InlinePostgresRecorder(InlineRecording, PostgresApplicationRecorder):
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        try:
            return super().insert_events(stored_events, **kwargs)
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
