"""SQLite as the event store: the library's recorder with a larger, tuned connection pool, and
the read models written in each command's own transaction (storage/inline.py)."""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from eventsourcing.persistence import InterfaceError, StoredEvent
from eventsourcing.sqlite import (
    SQLITE3_DEFAULT_LOCK_TIMEOUT,
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteCursor,
    SQLiteDatastore,
    SQLiteTransaction,
)

from titen.storage.inline import InlineRecording

SQLITE_PRAGMAS = (
    # WAL (which the library turns on) with synchronous=NORMAL: a commit no longer waits for an
    # fsync; the WAL is synced at each checkpoint. The database stays consistent after any
    # crash and a crash of the process loses nothing; an OS crash or power cut can lose the
    # commits since the last checkpoint. It is SQLite's recommended setting for WAL. FULL (the
    # default) costs an fsync per commit, two per acquire: on the benchmark machine that more
    # than halved acquires per second (docs/performance.md).
    "PRAGMA synchronous=NORMAL",
)
STATEMENT_CACHE = 128
"""Prepared statements each connection keeps (the sqlite3 module's own default). The library
opens its connections with `cached_statements=True`, a cache of one statement: each of a
command's dozen statements was prepared again and the one before it finalized, and both release
the interpreter lock, so under load the leader of a save waited to take it back twice per
statement while it held the write turn (docs/performance.md, "Round six")."""
# The library's SQLite pool keeps 5 connections and closes any more as they come back, so a
# server with 16 request threads kept opening new ones; pool connections open lazily.
SQLITE_POOL_SIZE = 32


class _ImmediateTransaction(SQLiteTransaction):
    """A write transaction that takes SQLite's write lock at BEGIN.

    The library begins every transaction DEFERRED. One that reads before it writes (claiming
    the read models' tracking rows, creating tables if missing) then has to upgrade its read
    lock, and in WAL mode SQLite refuses that upgrade at once with "database is locked",
    without waiting out the busy timeout, whenever another process committed since its read
    began: a `titen projections rebuild` or a second server failed that way beside a busy
    server. BEGIN IMMEDIATE waits its turn (the busy timeout) instead.
    """

    def __enter__(self) -> SQLiteCursor:
        cursor = self.connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        return cursor


class _TunedConnection(SQLiteConnection):
    """A library connection whose write transactions begin IMMEDIATE."""

    @contextmanager
    def transaction(self, *, commit: bool) -> Iterator[SQLiteCursor]:
        kind = _ImmediateTransaction if commit else SQLiteTransaction
        with kind(self, commit=commit) as cursor, cursor:
            yield cursor


class _Stack(deque[SQLiteConnection]):
    """The pool's idle connections, taken last in, first out: see TunedSQLitePool."""

    def popleft(self) -> SQLiteConnection:
        return self.pop()


class TunedSQLitePool(SQLiteConnectionPool):
    """The library's SQLite pool: SQLITE_PRAGMAS on every connection it opens, write
    transactions that wait for the write lock instead of failing on a busy database, and the
    connection returned last taken first.

    The library's pool is a queue: a connection goes to the back when returned and the front
    one is taken, so a server that has ever opened several connections uses each in turn. A
    SQLite connection keeps its own page cache, and drops it whenever another connection has
    written since its last transaction, so each command read its pages again (22 reads per
    acquire, one connection at a time) on a connection whose cache another had made stale. The
    most recently returned connection is the one whose cache is most likely still valid.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._pool = _Stack()

    def _create_connection(self) -> SQLiteConnection:
        """The library's connection (autocommit, WAL, rows by name), with STATEMENT_CACHE."""
        try:
            connection = sqlite3.connect(
                database=self.db_name,
                uri=True,
                check_same_thread=False,
                isolation_level=None,
                cached_statements=STATEMENT_CACHE,
                timeout=self.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT,
            )
            if not self.is_sqlite_memory_mode:
                connection.execute("PRAGMA journal_mode=WAL")
            for pragma in SQLITE_PRAGMAS:
                connection.execute(pragma)
        except (sqlite3.Error, TypeError) as exc:
            raise InterfaceError(exc) from exc
        connection.row_factory = sqlite3.Row
        return _TunedConnection(sqlite_conn=connection, max_age=self.max_age)


class TunedSQLiteRecorder(InlineRecording, SQLiteApplicationRecorder):
    """The library's SQLite event recorder; constructing it tunes the datastore it shares.

    Its insert writes the read models after the events, in the same transaction: SQLite's write
    lock is held from the first insert to the commit, so log positions commit in order.

    The library builds the SQLite datastore and its pool before anything can configure them
    (and `PERSISTENCE_MODULE` stays the library's). The application recorder is the first
    thing built on that datastore, before any connection is opened, so it replaces the pool
    there with a larger TunedSQLitePool; the snapshot and view recorders share it.
    """

    def __init__(self, datastore: SQLiteDatastore, **kwargs: Any):
        if not isinstance(datastore.pool, TunedSQLitePool):
            old = datastore.pool
            datastore.pool = TunedSQLitePool(
                db_name=old.db_name,
                lock_timeout=old.lock_timeout,
                pool_size=SQLITE_POOL_SIZE,
                max_overflow=SQLITE_POOL_SIZE,
                pool_timeout=old.pool_timeout,
                max_age=old.max_age,
                pre_ping=old.pre_ping,
            )
            old.close()
        super().__init__(datastore, **kwargs)

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        positions = super()._insert_events(c, stored_events, **kwargs)
        self.write_inline(c, positions, kwargs)
        return positions
