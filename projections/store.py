"""The tables beside the event store, written in the same transaction as their tracking record.

One class per backend, each extending the library's tracking recorder for that backend, so a
projection's rows and its position in the log commit together and each event applies once:
SQLite's here, PostgreSQL's in projections/postgres_store.py. SQL is written once for both:
`{table}` names are qualified and `%s` placeholders adapted by each backend's class.
"""

from __future__ import annotations

import re
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    IntegrityError,
    StoredEvent,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.sqlite import SQLiteTrackingRecorder, SQLiteTransaction

from titen.storage.numbered import numbered

Row = dict[str, Any]
Held = tuple[Sequence[Any], Any]
"""A row a merging writer holds: its values, and the writer's `source` when it was held."""
PLAIN_INSERT = re.compile(r"INSERT INTO \{\w+\} VALUES \(%s(?:, %s)*\)")
"""A statement that `Writer` may merge with others of its kind: one row into one table, with
no conflict clause and nothing returned."""
MERGED_ROWS = 16
"""The most rows of one table that one merged statement carries (more go in several): a batch of
group commit's usual size (4-8 commands at 16 connections) needs one statement. Its text depends
on the tables written and each one's row count (the tables in a fixed order), so the texts a
kind of command makes are few: an acquire's batches make one per batch size. psycopg prepares
the 100 most recently used texts of a connection; the rarer ones are sent unprepared."""


class HeldRowsFailed(Exception):
    """A merging writer's INSERT of held rows was refused before it reached the server (its
    cause): `source` is what `Writer.source` was when the failing row was held, so the failure
    can be blamed on the read model and event that wrote it rather than on whichever statement
    sent it."""

    def __init__(self, source: Any):
        super().__init__(f"held rows of {source} failed")
        self.source = source


class Writer:
    """One open write transaction on the store.

    `tables` renames tables in every statement (`{live}` becomes `{scratch}`), so a projection
    written for its live tables applies unchanged to scratch copies of them.

    A `merging` writer (PostgreSQL's) holds back one-row INSERTs (PLAIN_INSERT) and sends them
    as one statement, the tables' INSERTs joined by WITH (psycopg's cost is per statement far
    more than per row), before any other statement and at `flush`, so every statement still sees
    the rows written before it; one table's rows keep their order. A send that fails before it
    reaches the server raises HeldRowsFailed with the failing row's `source` (as it was when the
    row was held); an error the server answered is raised as it is (in a pipeline it may be an
    earlier statement's).
    """

    def __init__(
        self,
        store: ViewStore,
        cursor: Any,
        tables: Mapping[str, str] | None = None,
        *,
        merging: bool = False,
    ):
        self._store = store
        self._cursor = cursor
        self._tables = dict(tables or {})
        self._held: dict[str, list[Held]] | None = {} if merging else None
        self.source: Any = None
        """Who writes the rows held from now on (the projector sets its read model, position
        and event before each apply)."""

    def execute(self, template: str, params: Sequence[Any] = ()) -> None:
        template = self._renamed(template)
        if (
            self._held is not None
            and PLAIN_INSERT.fullmatch(template)
            and len(params) == template.count("%s")  # else psycopg refuses it here, blamed
        ):
            self._held.setdefault(template, []).append((params, self.source))
            return
        self._send(template, params)

    def flush(self) -> None:
        """Send the INSERTs a merging writer holds: one statement for every table's rows, or
        several when a table has more than MERGED_ROWS (the n-th statement carries each table's
        n-th MERGED_ROWS rows, so a table's rows still go in order)."""
        if not self._held:
            return
        held, self._held = self._held, {}
        chunks = {
            template: [
                rows[start : start + MERGED_ROWS] for start in range(0, len(rows), MERGED_ROWS)
            ]
            for template, rows in sorted(held.items())  # one text for one set of tables
        }
        for wave in range(max(len(table) for table in chunks.values())):
            parts = [
                (template, table[wave]) for template, table in chunks.items() if wave < len(table)
            ]
            try:
                shape = tuple((template, len(rows)) for template, rows in parts)
                values = [value for _, rows in parts for row, _ in rows for value in row]
                self._store.execute_numbered(self._cursor, _joined(self._store, shape), values)
            except Exception as failed:
                if self._store.answered_by_server(failed):
                    raise  # an earlier statement's, perhaps: the server does not say whose
                self._blame(parts, failed)

    def _blame(self, parts: Sequence[tuple[str, Sequence[Held]]], failed: Exception) -> None:
        """Raise HeldRowsFailed for the row that failed: the statement was refused before it
        was sent, so each row is sent alone until one fails. A failure of the whole statement
        only (an outage, say) is blamed on its first row."""
        for template, rows in parts:
            for params, source in rows:
                try:
                    self._cursor.execute(self._store.sql(template), params)
                except Exception as alone:
                    raise HeldRowsFailed(source) from alone
        raise HeldRowsFailed(parts[0][1][0][1]) from failed

    def fetchall(self, template: str, params: Sequence[Any] = ()) -> list[Row]:
        self._send(self._renamed(template), params)  # never held: its rows are read at once
        return [dict(row) for row in self._cursor.fetchall()]

    def columns(self, table: str) -> set[str]:
        """The names of a table's columns (none when it does not exist)."""
        template, params = self._store.columns_sql(self._tables.get(table, table))
        return {row["name"] for row in self.fetchall(template, params)}

    def _renamed(self, template: str) -> str:
        for live, other in self._tables.items():
            template = template.replace("{" + live + "}", "{" + other + "}")
        return template

    def _send(self, template: str, params: Sequence[Any]) -> None:
        """Execute at once, after what is held, so it sees every row written before it."""
        self.flush()
        self._cursor.execute(self._store.sql(template), params)

    def log(self, recorder: Any, after: int, until: int) -> list[tuple[int, StoredEvent]]:
        """The stored events after one log position up to another, read in this transaction."""
        rows = self.fetchall(self._store.log_sql(recorder.events_table_name), [after, until])
        return [
            (
                row["notification_id"],
                StoredEvent(
                    originator_id=UUID(str(row["originator_id"])),
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                ),
            )
            for row in rows
        ]

    def redirected(self, tables: Mapping[str, str]) -> Writer:
        """The same transaction, with the named tables replaced by others."""
        self.flush()
        return Writer(self._store, self._cursor, tables)

    def claim(self, name: str) -> int:
        """Lock a projection's tracking record until this transaction ends; return its position.

        Whoever changes a projection claims it first, so two writers of one projection queue
        here instead of both applying the same events, and each learns the position it must
        continue from. It is a write, so on SQLite it also takes the database's write lock before
        anything is read (a read first could not be upgraded once another writer committed).
        """
        claim = (
            f"UPDATE {self._store.tracking_table} SET notification_id = notification_id"
            " WHERE application_name = %s RETURNING notification_id"
        )
        rows = self.fetchall(claim, [name])
        if not rows:
            self.execute(
                f"INSERT INTO {self._store.tracking_table} (application_name, notification_id)"
                " VALUES (%s, 0) ON CONFLICT (application_name) DO NOTHING",
                [name],
            )
            rows = self.fetchall(claim, [name])
        return int(rows[0]["notification_id"])

    def claim_all(self, names: Sequence[str]) -> dict[str, int]:
        """`claim` several projections with one statement: their positions, by name.

        The records are locked in the order given (on PostgreSQL explicitly, so two writers
        claiming the same projections in the same order cannot deadlock; SQLite's write lock
        covers the whole database). Records not there yet are created at 0 first, as `claim`
        does.
        """
        claim = self._store.claim_sql(len(names))
        rows = self.fetchall(claim, self._store.claim_params(names))
        if len(rows) < len(names):
            found = {row["application_name"] for row in rows}
            # Created in the order given too: two processes creating them in different orders
            # would each wait for the other's uncommitted index entry (a deadlock).
            missing = [name for name in names if name not in found]
            self.execute(
                f"INSERT INTO {self._store.tracking_table} (application_name, notification_id)"
                f" VALUES {', '.join(['(%s, 0)'] * len(missing))}"
                " ON CONFLICT (application_name) DO NOTHING",
                missing,
            )
            rows = self.fetchall(claim, self._store.claim_params(names))
        return {row["application_name"]: int(row["notification_id"]) for row in rows}

    def advance(self, names: Sequence[str], position: int) -> None:
        """`track` several projections to one position with one statement; raises
        IntegrityError unless every one of them advances."""
        marks = ", ".join(["%s"] * len(names))
        rows = self.fetchall(
            f"UPDATE {self._store.tracking_table} SET notification_id = %s"
            f" WHERE application_name IN ({marks}) AND notification_id < %s"
            " RETURNING application_name",
            [position, *names, position],
        )
        if len(rows) != len(names):
            raise IntegrityError(f"tracking did not advance to {position} for all of {names}")

    def move(self, names: Sequence[str], position: int) -> None:
        """Record several projections' new position, locking their records until the commit.

        For inline writes, which hold the log's write lock: nobody else can record a later
        position meanwhile, so it needs no check (and sends no round trip to read one).
        """
        self.execute(self._store.move_sql(len(names)), self._store.move_params(names, position))

    def set_position(self, name: str, position: int) -> None:
        """Record a claimed projection's position, which may also move back (a scratch reset)."""
        self.execute(
            f"UPDATE {self._store.tracking_table} SET notification_id = %s"
            " WHERE application_name = %s",
            [position, name],
        )

    def track(self, tracking: Tracking) -> None:
        """Record a projection's new position; raises IntegrityError if it does not advance."""
        self.flush()
        self._store._insert_tracking(self._cursor, tracking)

    def forget(self, name: str) -> None:
        """Remove a projection's tracking record (it starts again from the beginning)."""
        self.execute(
            f"DELETE FROM {self._store.tracking_table} WHERE application_name = %s", [name]
        )


class ViewStore(TrackingRecorder, ABC):
    tracking_table: str
    skip_locked: str = ""
    """Appended to a SELECT that picks rows to change: on PostgreSQL it locks the rows it picks
    and skips those another transaction holds, so concurrent pickers never queue on one row.
    SQLite needs nothing: its writers take turns on the whole database."""
    single_writer: bool = False
    """Whether every write transaction, even one that changes nothing, takes the whole
    database's write lock (SQLite's BEGIN IMMEDIATE): then look with a read before writing."""
    notifies: bool = False
    """Whether a change can be pushed to every process at once (PostgreSQL's NOTIFY): else a
    process learns of another's change by reading it (SQLite, a store on one host)."""
    clustered: str = ""
    """What `{CLUSTERED}` in a template becomes, after a CREATE TABLE whose rows its primary key
    orders: SQLite's WITHOUT ROWID, so a row goes into one B-tree rather than a rowid table and
    its key's index. PostgreSQL's tables are heaps beside their indexes either way."""
    merges_inserts: bool = False
    """Whether a command's inline write merges its read models' one-row INSERTs (`Writer`):
    on PostgreSQL each statement costs the client's Python about 20 us, under the events
    table's lock, and the server's refusal of a row is reported by a later statement or at the
    pipeline's end anyway, whichever statement carried it. SQLite's statements run in C, each
    reports its own refusal, and SQLite has no INSERT inside WITH to join them by."""

    datastore: Any
    """The database the library's recorder opened: each backend's base sets its own kind."""

    @abstractmethod
    def _transaction(self, *, commit: bool) -> Any: ...

    def execute_numbered(self, cursor: Any, statement: str, params: Sequence[Any]) -> None:
        """Execute a statement whose placeholders are numbered ($1, $2, ...) on `cursor`'s
        connection: a merging writer's joined INSERT (only a store that `merges_inserts`)."""
        raise NotImplementedError(f"{type(self).__name__} does not merge inserts")

    def answered_by_server(self, failed: Exception) -> bool:
        """Whether an error came back from the database server, rather than being raised by
        the client before anything was sent. Only a merging writer asks (PostgreSQL's)."""
        return False

    @abstractmethod
    def _insert_tracking(self, cursor: Any, tracking: Tracking) -> None:
        """Each backend's library recorder has it; Writer.track calls it in its transaction."""

    @abstractmethod
    def _qualify(self, table: str) -> str: ...

    @abstractmethod
    def _placeholders(self, statement: str) -> str: ...

    @contextmanager
    def writing(self) -> Iterator[Writer]:
        with self._transaction(commit=True) as cursor:
            yield Writer(self, cursor)

    def confirm_replicated(self, why: str) -> None:
        """Return once what is committed now is as safe as a commit answered as done (on every
        synchronous standby); else NotReplicated. A store with no standbys: at once."""

    def writes_blocked(self) -> str | None:
        """Why no write can commit now although the store answers, or None. A store with no
        standbys: never."""
        return None

    def query(self, template: str, params: Sequence[Any] = ()) -> list[Row]:
        with self._transaction(commit=False) as cursor:
            cursor.execute(self.sql(template), params)
            return [dict(row) for row in cursor.fetchall()]

    def change(self, template: str, params: Sequence[Any] = ()) -> list[Row]:
        """One changing statement, committed on its own; the rows it returns (RETURNING)."""
        with self.writing() as writer:
            return writer.fetchall(template, params)

    def together(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Row]]:
        """Statements in one transaction; the rows each returns (RETURNING), in order."""
        with self.writing() as writer:
            return [writer.fetchall(template, params) for template, params in statements]

    def sql(self, template: str) -> str:
        return _compile(self, template)

    def claim_sql(self, count: int) -> str:
        """A statement that locks `count` tracking records and returns their positions."""
        marks = ", ".join(["%s"] * count)
        return (
            f"UPDATE {self.tracking_table} SET notification_id = notification_id"
            f" WHERE application_name IN ({marks}) RETURNING application_name, notification_id"
        )

    def claim_params(self, names: Sequence[str]) -> list[Any]:
        return list(names)

    @abstractmethod
    def columns_sql(self, table: str) -> tuple[str, list[Any]]:
        """A query of a table's column names (`name`, one row each), and its parameters."""

    @abstractmethod
    def log_sql(self, events_table: str) -> str:
        """The events table's rows between two positions, in log order."""

    def move_sql(self, count: int) -> str:
        """A statement that sets `count` tracking records to one position."""
        marks = ", ".join(["%s"] * count)
        return (
            f"UPDATE {self.tracking_table} SET notification_id = %s"
            f" WHERE application_name IN ({marks})"
        )

    def move_params(self, names: Sequence[str], position: int) -> list[Any]:
        return [position, *names]


@lru_cache(maxsize=512)
def _compile(store: ViewStore, template: str) -> str:
    return store._placeholders(template.format_map(_Qualified(store)))


class _Qualified(dict[str, str]):
    def __init__(self, store: ViewStore):
        super().__init__(CLUSTERED=store.clustered)
        self._store = store

    def __missing__(self, table: str) -> str:
        return self._store._qualify(table)


class SQLiteViewStore(SQLiteTrackingRecorder, ViewStore):
    tracking_table = "tracking"
    single_writer = True
    clustered = " WITHOUT ROWID"

    def _transaction(self, *, commit: bool) -> Any:
        return self.datastore.transaction(commit=commit)

    def query(self, template: str, params: Sequence[Any] = ()) -> list[Row]:
        """One statement on its own: the library's connections autocommit, so a lone SELECT is
        a transaction (and a snapshot) by itself. BEGIN and ROLLBACK around it would be two more
        statements, each handing the interpreter lock to another thread and back, on reads
        made for every request (the key cache's revision, the webhook presence). A failure is
        raised as the library's error for it, as in a transaction."""
        with self.datastore.get_connection(commit=False) as conn:
            try:
                with conn.cursor() as cursor:
                    cursor.execute(self.sql(template), params)
                    return [dict(row) for row in cursor.fetchall()]
            except sqlite3.Error as failed:
                # The library's translation of sqlite3's errors (after a ROLLBACK that finds
                # no transaction open): it raises the library's error for `failed`.
                SQLiteTransaction(conn).__exit__(type(failed), failed, failed.__traceback__)
                raise

    def _qualify(self, table: str) -> str:
        return table

    def _placeholders(self, statement: str) -> str:
        return statement.replace("%s", "?")

    def columns_sql(self, table: str) -> tuple[str, list[Any]]:
        return "SELECT name FROM pragma_table_info(%s)", [table]

    def log_sql(self, events_table: str) -> str:
        return (
            "SELECT rowid AS notification_id, originator_id, originator_version, topic, state"
            f" FROM {events_table} WHERE rowid > %s AND rowid <= %s ORDER BY rowid"
        )


@lru_cache(maxsize=256)
def _joined(store: ViewStore, shape: tuple[tuple[str, int], ...]) -> str:
    """One statement for held rows, as (template, row count) per table: each table's rows as
    one INSERT of many rows, every INSERT but the last in a WITH before it (PostgreSQL runs them
    all, in one snapshot), its placeholders numbered (storage/numbered.py). Built once per
    shape: one set of tables and row counts makes one text."""
    inserts = []
    for template, count in shape:
        into, row = template.split(" VALUES ")
        inserts.append(f"{into} VALUES {', '.join([row] * count)}")
    *joined, last = inserts
    if joined:
        last = (
            "WITH "
            + ", ".join(f"w{n} AS ({insert})" for n, insert in enumerate(joined))
            + f" {last}"
        )
    return numbered(store.sql(last))
