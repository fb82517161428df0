"""PostgreSQL as the event store: the library's recorder, with the read models written inline.

An insert is one transaction in pipeline mode, in two round trips: BEGIN, lock timeout, NOTIFY,
the events table's EXCLUSIVE lock and the events' insert (returning their positions and the
database's clock); then, the clock checked, the read models (storage/inline.py) and COMMIT. The
lock keeps the log gap-free for readers (docs/leases.md): positions become visible in order. A
commit whose answer is lost is not retried (it would meet its own events as a lost race: one
request, two leases) but settled (storage/settle.py): its old session ended, its events looked
for. Found: it landed. Absent: NotCommitted. Another command's: IntegrityError. Unreachable:
OutcomeUnknown (docs/operations.md). A landed commit counts only once synchronous standbys hold
it (storage/replication.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import psycopg
from eventsourcing.persistence import IntegrityError, InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresFactory,
)
from psycopg.conninfo import conninfo_to_dict
from psycopg.sql import SQL, Composable, Identifier, Literal

from titen.storage import deadlines, replication
from titen.storage.clock import ClockCheck
from titen.storage.inline import DOMAIN_EVENTS, InlineRecording
from titen.storage.numbered import numbered
from titen.storage.outages import ClockDisagrees, NotCommitted, OutcomeUnknown, is_outage
from titen.storage.request_budget import committing, left
from titen.storage.settle import END_SESSION_MS, again_while_lost, answer_lost, end_session

log = logging.getLogger("titen.storage")
LIBPQ_OPTIONS = "TITEN_LIBPQ_OPTIONS"
"""The library setting that carries the database URL's libpq parameters to the pool."""

C = TypeVar("C", bound=type)
RETURNING = "RETURNING notification_id, clock_timestamp() AS now"
"""What the events' insert answers: their positions and the database's clock, read under the
table lock (storage/clock.py checks the events' instants against it)."""
LOCK_MARGIN_SECONDS = 0.2
"""How much sooner than the client's own wait the server gives up on the table's lock: its
refusal (nothing sent to commit) then comes first."""
VALUES_ROWS = 16
"""Saves of up to this many events send them as rows of VALUES, larger ones as four arrays
(`InlinePostgresRecorder._insert_stored_events`): a statement per row count, each prepared
once a connection has used it five times, for the sizes that group commit's batches have."""


def run_once(*names: str) -> Callable[[C], C]:
    """A class decorator: the named methods of the library's recorder run once, without the
    retry it wraps them in (up to 10 attempts, 0.2 s apart, on any connection error).

    A retry would make one bounded wait ten, and a retried insert whose first attempt had
    committed would meet its own events as a lost race. A failed call fails at once, as an
    outage the caller answers with 503.
    """

    def decorate(cls: C) -> C:
        for name in names:
            method = getattr(cls, name)
            setattr(cls, name, getattr(method, "__wrapped__", method))
        return cls

    return decorate


class _RollBack(Exception):
    """Carries a failure after the insert that left nothing committed out of the library's
    connection block as itself: the clock's refusal, a kept row that exists already, a read
    model's row refused (by its Python code, or by the server, which then skips the COMMIT),
    the connection failing before the COMMIT was sent.

    That block turns psycopg's errors into the library's: a read model's duplicate row would
    leave as IntegrityError, a lost race that runs the command again, and a connection lost
    before the COMMIT as one whose commit may have landed, settled for nothing.
    """

    def __init__(self, failed: Exception):
        super().__init__(str(failed))
        self.failed = failed


@run_once("select_events")
class SnapshotRecorder(PostgresAggregateRecorder):
    """The library's recorder of snapshots, its reads not retried (see `run_once`)."""


@run_once("select_events", "select_notifications", "max_notification_id")
class InlinePostgresRecorder(InlineRecording, PostgresApplicationRecorder):
    check_clock: ClockCheck | None = None
    """Given clock_timestamp() read in a save's transaction and the instants of its events,
    refuses them (ClockDisagrees) when they disagree: set by service/bootstrap.py when commands
    decide by the database's clock (storage/clock.py), not when a test's clock is given."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._sending = threading.local()  # the connection this thread's insert runs on
        # What the library's lock statements and NOTIFY do, in two statements, not three.
        self._before_insert = [
            SQL("SELECT set_config('lock_timeout', $1, true), pg_notify({0}, '')")
            .format(Literal(self.channel_name))
            .as_string(),
            cast(Composable, self.lock_table_statements[-1]).as_string(),
        ]
        into = SQL("INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state)")
        self._insert_into = into.format(
            schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name)
        ).as_string()
        self._insert_rows: dict[int, str] = {}  # a save of n events: its numbered statement
        self._insert_arrays = numbered(
            f"{self._insert_into} SELECT * FROM unnest(%s::{self.datastore.originator_id_type}[],"
            f" %s::bigint[], %s::text[], %s::bytea[]) {RETURNING}"
        )
        self._find_events = SQL(
            "SELECT e.notification_id, e.topic, e.state"
            " FROM unnest(%s::{id_type}[], %s::bigint[]) WITH ORDINALITY AS k(id, version, n)"
            " JOIN {schema}.{table} e"
            " ON e.originator_id = k.id AND e.originator_version = k.version ORDER BY k.n"
        ).format(
            id_type=SQL(self.datastore.originator_id_type),
            schema=Identifier(self.datastore.schema),
            table=Identifier(self.events_table_name),
        )

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        if not stored_events:
            return None
        self._sending.connection = None
        replication.forget()
        try:
            with committing(), self.datastore.get_connection() as conn:
                self._sending.connection = conn  # before anything is sent: see `_settle`
                positions = self._transact(conn, stored_events, kwargs)
        except _RollBack as rolled_back:
            failed = rolled_back.failed
            # Refused, or failed before the COMMIT was sent: nothing landed. A clock's refusal is
            # answered as itself: the command runs again on a fresh reading
            # (service/application.py).
            if is_outage(failed) and not isinstance(failed, ClockDisagrees):
                raise NotCommitted(f"the commit was not sent: {failed}") from failed
            raise failed from failed.__cause__
        except (OperationalError, InterfaceError) as failed:
            lost = self._sending.connection
            if lost is None or not answer_lost(lost):
                raise  # nothing was sent, or the server answered the error: nothing landed
            return self._settle(lost, stored_events, failed)
        if replication.warned():
            replication.confirm_on(self.datastore, replication.WARNED)
        return positions

    def _insert_stored_events(
        self, curs: Any, stored_events: Sequence[StoredEvent], **_: Any
    ) -> None:
        """What the library sends (the lock's timeout, the table lock, NOTIFY, the insert
        returning the events' positions), in fewer statements and with less work done while
        the table lock is held, which every save in every process waits for.

        The timeout and NOTIFY go in one SELECT, and the insert also returns the database's
        clock. Statements are rendered once, numbered (storage/numbered.py; `curs` is a
        RawCursor), and the events go as rows of VALUES, which psycopg's C dumpers write, not as
        the library's array of a composite type, escaped in Python; a save of more than
        VALUES_ROWS events (rare) sends four plain arrays. Both return the positions in the
        events' order, as the library's insert does.
        """
        timeout, lock = self._before_insert
        curs.execute(timeout, [self._lock_wait()], prepare=True)
        curs.execute(lock, prepare=True)
        if len(stored_events) <= VALUES_ROWS:
            self._insert_as_rows(curs, stored_events)
        else:
            self._insert_as_arrays(curs, stored_events)

    def _lock_wait(self) -> str:
        """PostgreSQL's lock_timeout for this insert: the store's, or less, so that the server
        gives up on the table's lock just before this request's commit must end."""
        seconds = left(float(self.datastore.lock_timeout)) - LOCK_MARGIN_SECONDS
        return f"{max(1, int(seconds * 1000))}ms"

    def _insert_as_rows(self, curs: Any, stored_events: Sequence[StoredEvent]) -> None:
        count = len(stored_events)
        statement = self._insert_rows.get(count)
        if statement is None:
            rows = ", ".join(["(%s, %s, %s, %s)"] * count)
            statement = numbered(f"{self._insert_into} VALUES {rows} {RETURNING}")
            self._insert_rows[count] = statement
        values = [
            value
            for event in stored_events
            for value in (event.originator_id, event.originator_version, event.topic, event.state)
        ]
        curs.execute(statement, values)

    def _insert_as_arrays(self, curs: Any, stored_events: Sequence[StoredEvent]) -> None:
        curs.execute(
            self._insert_arrays,
            [
                [event.originator_id for event in stored_events],
                [event.originator_version for event in stored_events],
                [event.topic for event in stored_events],
                [event.state for event in stored_events],
            ],
        )

    def _transact(
        self, conn: Any, stored_events: Sequence[StoredEvent], kwargs: dict[str, Any]
    ) -> Sequence[int]:
        """The insert's transaction in two round trips, each a pipeline that sends its
        statements at once and waits at its end: BEGIN, the lock's timeout with NOTIFY, the
        table lock, the insert (its positions and the database's clock); then, once the clock
        has been checked here, the read models' rows (which need those positions) and COMMIT.

        BEGIN and COMMIT are plain statements on the pooled connection (in autocommit mode, as
        the library keeps it), not psycopg's `transaction()`, which in pipeline mode waits once
        for BEGIN alone and twice more at its end. A row the server refuses skips the COMMIT
        queued behind it. Whatever fails leaves the transaction open (or aborted, by the
        server's error), and the pool's connection block rolls it back as it takes the
        connection back.
        """
        assert conn.autocommit
        # The insert's statements are numbered (storage/numbered.py): a RawCursor sends them.
        with conn.cursor() as curs, psycopg.RawCursor(conn) as inserting:
            try:
                with conn.pipeline():
                    curs.execute("BEGIN")
                    self._insert_stored_events(inserting, stored_events)  # lock, NOTIFY, insert
                inserted = inserting.fetchall()
            except Exception as failed:
                if is_outage(failed):  # no COMMIT was sent: nothing to settle
                    raise _RollBack(failed) from failed
                raise  # as the library's error (a duplicate version: IntegrityError)
            positions = [row["notification_id"] for row in inserted]
            committing = False
            try:
                self._check(inserted[0]["now"], kwargs)
                with conn.pipeline():
                    self.write_inline(curs, positions, kwargs)
                    # From here the COMMIT may leave at any moment: inside `execute`, which
                    # flushes libpq's buffer, or as a timed-out connection is finished.
                    committing = True
                    curs.execute("COMMIT")
            except Exception as failed:
                if committing and is_outage(failed):
                    raise  # the COMMIT may have landed: `insert_events` settles a lost answer
                raise _RollBack(_lost_or(conn, failed)) from failed
        return positions

    def _settle(
        self, lost: Any, stored_events: Sequence[StoredEvent], failed: Exception
    ) -> Sequence[int]:
        """Whether the events of a commit whose answer was lost are in the store: their log
        positions if so, else NotCommitted (or IntegrityError when another command's events
        hold those versions); OutcomeUnknown if the store cannot tell in time."""
        ended, rows = again_while_lost(lambda: self._find(lost, stored_events, failed), failed)
        if not ended:
            raise OutcomeUnknown(
                f"the commit's answer was lost ({failed}) and its session did not end within "
                f"{END_SESSION_MS} ms"
            ) from failed
        if not rows:
            raise NotCommitted(f"the commit did not land: {failed}") from failed
        if not _ours(rows, stored_events):
            raise IntegrityError("another command saved these versions first")
        log.warning("a commit whose answer was lost had landed (%s): answered as done", failed)
        return [row["notification_id"] for row in rows]

    def _find(
        self, lost: Any, stored_events: Sequence[StoredEvent], failed: Exception
    ) -> tuple[bool, list[Any]]:
        """Whether the lost commit's session has ended, and the rows found at its events'
        versions, checked on the standbys when they are its own."""
        with self.datastore.get_connection() as conn:
            ended = end_session(conn, getattr(lost, "session", None))
            rows = conn.execute(
                self._find_events,
                [
                    [e.originator_id for e in stored_events],
                    [e.originator_version for e in stored_events],
                ],
            ).fetchall()
            if ended and rows and _ours(rows, stored_events):
                # On this connection, known to answer: a pooled one may be a dead one.
                replication.asked(conn, f"a commit whose answer was lost ({failed}) landed")
        return ended, rows

    def _check(self, database: Any, kwargs: dict[str, Any]) -> None:
        """Hand the database's clock and the instants the save's events carry (each stamped
        with the instant its command decided at) to `check_clock`, if set."""
        if self.check_clock is not None:
            events = kwargs.get(DOMAIN_EVENTS, ())
            self.check_clock(database, [event.timestamp for event in events])


def _lost_or(conn: Any, failed: Exception) -> Exception:
    """`failed`, or NotCommitted when the connection was lost before the COMMIT went out.

    A read model that fetches mid-pipeline (the event log looks up a handoff's creation) on a
    connection that dies then gets the result of an earlier statement, not an error: psycopg
    stops reading at the lost connection and leaves the cursor holding what it had read
    ("the last operation didn't produce records (command status: DELETE 1)"). Taken at its
    word, that is a read model's failure, recorded until an operator rebuilds it; it is an
    outage, and nothing was committed.
    """
    if is_outage(failed) or not answer_lost(conn):
        return failed
    lost = NotCommitted(f"the connection was lost before the COMMIT was sent: {failed}")
    lost.__cause__ = failed
    return lost


def _ours(rows: Sequence[Any], stored_events: Sequence[StoredEvent]) -> bool:
    """Whether the rows found at a lost commit's versions are its own events, not another
    command's that took those versions first."""
    return len(rows) == len(stored_events) and all(
        row["topic"] == event.topic and bytes(row["state"]) == event.state
        for row, event in zip(rows, stored_events, strict=False)
    )


class TitenPostgresFactory(PostgresFactory):
    """The library's PostgreSQL factory with titen's recorders and its pool tuned
    (storage/deadlines.py) before any connection is opened, with the database URL's libpq
    parameters (`target_session_attrs`, ...) added to the library's host, port and user."""

    aggregate_recorder_class = SnapshotRecorder
    application_recorder_class = InlinePostgresRecorder

    def __init__(self, env: Any):
        super().__init__(env)
        deadlines.tune(self.datastore.pool, conninfo_to_dict(self.env.get(LIBPQ_OPTIONS) or ""))
