"""SQLite as the event store: the library's recorder with a larger, tuned connection pool, and
the read models written in each command's own transaction (storage/inline.py)."""

from __future__ import annotations

import logging
import mmap
import sqlite3
import struct
import threading
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

log = logging.getLogger("titen.app")

SQLITE_PRAGMAS = (
    # WAL (which the library turns on) with synchronous=NORMAL: a commit does not wait for an
    # fsync; the WAL is synced at each checkpoint. The database stays consistent after any
    # crash and a crash of the process loses nothing; an OS crash or power cut can lose the
    # commits since the last checkpoint. It is SQLite's recommended setting for WAL. FULL (the
    # default) costs an fsync per commit, two per acquire.
    "PRAGMA synchronous=NORMAL",
)
CHECKPOINT_ROWS = 750
"""Rows a server writes (all its worker processes together) between two WAL checkpoints: at
1.0-1.4 pages per row, about the 1,000 pages at which SQLite checkpoints by itself. With
synchronous=NORMAL a checkpoint is also when the WAL is synced, so this bounds what a power cut
can take as SQLite's default does. Rows, not commits: a batch of commands is one commit."""
STATEMENT_CACHE = 128
"""Prepared statements each connection keeps (the sqlite3 module's own default). The library's
`cached_statements=True` is a cache of one: each of a command's dozen statements would be
prepared again and the one before it finalized, both releasing the interpreter lock that the
leader of a save must take back while it holds the write turn."""
# The library's SQLite pool keeps 5 connections and closes any more as they come back, so a
# server with 16 request threads would keep opening new ones; pool connections open lazily.
SQLITE_POOL_SIZE = 32


NOT_DUE = -1
"""`Progress.restart_below` while no write has to finish a checkpoint."""


class Progress:
    """Where the WAL's checkpoints stand: the rows committed since the last one, and the WAL's
    frames at the last one until a write has seen the WAL start over (`Checkpointer.finish`;
    NOT_DUE once one has). Plain memory, or (`shared`) an anonymous shared mapping, which the
    processes forked after it is made see as one."""

    _FIELD = struct.Struct("q")  # each field a 64-bit word of its own, written alone

    def __init__(self, shared: bool = False):
        self._memory = mmap.mmap(-1, 16) if shared else bytearray(16)
        self.restart_below = NOT_DUE

    @property
    def rows(self) -> int:
        return int(self._FIELD.unpack_from(self._memory, 0)[0])

    @rows.setter
    def rows(self, value: int) -> None:
        self._FIELD.pack_into(self._memory, 0, value)

    @property
    def restart_below(self) -> int:
        return int(self._FIELD.unpack_from(self._memory, 8)[0])

    @restart_below.setter
    def restart_below(self, value: int) -> None:
        self._FIELD.pack_into(self._memory, 8, value)


class Checkpointer:
    """Copies the WAL back into the database on a thread of its own, not inside a commit.

    SQLite would checkpoint in the commit that takes the WAL past 1,000 pages, while that save
    holds the write turn every command of every worker waits for; here no connection does
    (`wal_autocheckpoint=0`). Every CHECKPOINT_ROWS committed rows the thread (started when the
    first is due) runs a PASSIVE checkpoint, which neither waits for writers nor makes them wait.
    SQLite starts the WAL over only for a writer that begins when every frame has been copied,
    so under steady writes the file would grow without end: the next write transaction copies
    the few frames appended since (`finish`) and begins on a fully copied WAL. The workers of one
    server share this progress (`share`), so the WAL, and what a power cut can take, does not
    grow with their number. The last connection to close checkpoints what is left (SQLite's).
    """

    def __init__(self, db_name: str, timeout: float):
        self._db_name = db_name
        self._timeout = timeout
        self._lock = threading.Lock()
        self._progress = Progress()
        """This process's, or (`share`) that of every worker process of its server."""
        self._due = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None

    def share(self, progress: Progress) -> None:
        """Keep the progress in `progress` (`shared_progress`), with the other worker
        processes of the server.

        Saves update it while they hold the turn that the workers' saves share
        (storage/group_commit.py). A write outside a save (a key, a webhook), or a save whose
        turn timed out, may race another process's: a lost update moves the next checkpoint
        by one commit's rows, or has one more write try to finish the last, no more."""
        self._progress = progress

    def committed(self, rows: int) -> None:
        """Count a commit's rows; wake the thread (starting it the first time) when a
        checkpoint is due."""
        with self._lock:
            counted = self._progress.rows + rows
            if counted < CHECKPOINT_ROWS or self._closing:
                self._progress.rows = counted
                return
            self._progress.rows = 0
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="titen-sqlite-checkpoint", daemon=True
                )
                self._thread.start()
        self._due.set()

    def finish(self, cursor: sqlite3.Cursor) -> None:
        """Before a write transaction begins (on `cursor`'s connection), after the thread's
        checkpoint: copy what was appended since, so that this transaction starts the WAL over.

        It cannot while a reader of another connection is reading from the WAL at that moment
        (another worker's, say), so each transaction tries until one has: until a try finds
        fewer frames in the WAL than the last (the thread's, or the previous try's). Each try
        copies only the frames appended since the one before."""
        restart_below = self._progress.restart_below
        if restart_below == NOT_DUE:
            return
        try:
            frames = _checkpoint(cursor)
        except sqlite3.Error:
            _failed()
            frames = -1  # give up, not fail once per command: the next checkpoint tries again
        if frames is None:
            return
        with self._lock:  # unless a checkpoint has run again meanwhile
            if self._progress.restart_below == restart_below:
                self._progress.restart_below = NOT_DUE if frames < restart_below else frames

    def close(self) -> None:
        """Stop the thread after the checkpoint it may be running."""
        with self._lock:
            self._closing = True
            thread = self._thread
        self._due.set()
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        connection: sqlite3.Connection | None = None
        try:
            while self._wait():
                try:
                    connection = connection or _connect(self._db_name, self._timeout)
                    frames = _checkpoint(connection)
                except Exception:  # any: a thread that ended would leave the WAL to grow
                    _failed()
                    continue
                if frames:  # none: the WAL is empty, nothing to start over
                    with self._lock:
                        self._progress.restart_below = frames
        finally:
            if connection is not None:
                connection.close()

    def _wait(self) -> bool:
        """Sleep until a checkpoint is due (True) or the store closes (False)."""
        self._due.wait()
        self._due.clear()
        return not self._closing


def shared_progress() -> Progress:
    """A Progress in memory that forked processes share: made by a server before it forks its
    workers, then kept by each worker's Checkpointer (`Checkpointer.share`)."""
    return Progress(shared=True)


def _checkpoint(connection: sqlite3.Connection | sqlite3.Cursor) -> int | None:
    """A PASSIVE checkpoint: the frames the WAL then held, or None when another connection (the
    thread of another worker) was checkpointing already."""
    busy, frames, _copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return None if busy else int(frames)


def _failed() -> None:
    log.warning("a WAL checkpoint failed; the next one due tries again", exc_info=True)


def _connect(db_name: str, timeout: float, *, memory: bool = False) -> sqlite3.Connection:
    """A connection as the library opens them (autocommit, WAL), with SQLITE_PRAGMAS, its
    checkpoints left to the Checkpointer, and STATEMENT_CACHE."""
    connection = sqlite3.connect(
        database=db_name,
        uri=True,
        check_same_thread=False,
        isolation_level=None,
        cached_statements=STATEMENT_CACHE,
        timeout=timeout,
    )
    if not memory:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA wal_autocheckpoint=0")
    for pragma in SQLITE_PRAGMAS:
        connection.execute(pragma)
    return connection


class _ImmediateTransaction(SQLiteTransaction):
    """A write transaction that takes SQLite's write lock at BEGIN.

    The library begins every transaction DEFERRED. One that reads before it writes (claiming
    the read models' tracking rows, creating tables if missing) then has to upgrade its read
    lock, and in WAL mode SQLite refuses that upgrade at once with "database is locked",
    without waiting out the busy timeout, whenever another process committed since its read
    began: a `titen projections rebuild` or a second server would fail that way beside a busy
    server. BEGIN IMMEDIATE waits its turn (the busy timeout) instead.
    """

    connection: _TunedConnection

    def __enter__(self) -> SQLiteCursor:
        cursor = self.connection.cursor()
        if self.connection.checkpointer is not None:
            self.connection.checkpointer.finish(cursor.sqlite_cursor)
        self._sqlite = cursor.sqlite_cursor.connection
        self._changes = self._sqlite.total_changes
        cursor.execute("BEGIN IMMEDIATE")
        return cursor

    def __exit__(self, *exc_info: Any) -> None:
        super().__exit__(*exc_info)  # raises what the transaction raised, or its commit did
        if self.connection.checkpointer is not None:
            self.connection.checkpointer.committed(self._sqlite.total_changes - self._changes)


class _TunedConnection(SQLiteConnection):
    """A library connection whose write transactions begin IMMEDIATE, and count their commits
    for the store's Checkpointer (None in memory, where there is no WAL)."""

    def __init__(self, *args: Any, checkpointer: Checkpointer | None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.checkpointer = checkpointer

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
    transactions that wait for the write lock instead of failing on a busy database, WAL
    checkpoints on a thread of their own (Checkpointer), the connection returned last taken
    first, and an idle connection handed over at once.

    The library's pool is a queue, which uses every connection it has opened in turn. A SQLite
    connection keeps its own page cache and drops it whenever another connection has written
    since its last transaction: the most recently returned connection is the one whose cache is
    most likely still valid.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._pool = _Stack()
        self._timeout = self.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT
        self.checkpointer = (
            None if self.is_sqlite_memory_mode else Checkpointer(self.db_name, self._timeout)
        )

    def get_connection(
        self, timeout: float | None = None, *, is_writer: bool | None = None
    ) -> SQLiteConnection:
        """An idle connection at once (`_idle`), else the library's way, which waits its turn.

        The library's way is built for a pool that runs out: every request joins a queue (a
        `threading.Semaphore`, pure Python) and takes two or three locks, even when a connection
        sits idle, as nearly always here (SQLITE_POOL_SIZE connections for at most --threads
        requests). The queue only orders requests that wait; one that finds a connection idle
        may be served before one waiting there (for the writer's lock, say)."""
        idle = self._idle(is_writer)
        return idle if idle is not None else super().get_connection(timeout, is_writer=is_writer)

    def _idle(self, is_writer: bool | None) -> SQLiteConnection | None:
        """The connection returned last, marked in use as the library's `_get_connection`
        marks it, or None: none is idle (a closed pool has none), another writer holds the
        writer's lock, reads and writes exclude each other (an in-memory store), or idle
        connections are to be tried before use (`pre_ping`)."""
        if self._mutually_exclusive_read_write or self.pre_ping:
            return None
        if is_writer is True and not self._writer_lock.acquire(blocking=False):
            return None
        with self._put_condition:
            conn = self._pool.pop() if self._pool else None
            if conn is not None and conn.in_use.acquire(blocking=False):
                if not conn.closed:
                    self._in_use[id(conn)] = conn
                    conn.is_writer = is_writer
                    self._count(is_writer)
                    return conn
                conn.in_use.release()  # closed by its max-age timer: dropped, as the library does
            elif conn is not None:
                self._pool.append(conn)  # its timer is closing it: the library's way decides
        if is_writer is True:
            self._writer_lock.release()
        return None

    def _count(self, is_writer: bool | None) -> None:
        """Count a connection handed out for writing or reading, as the library's way does
        (its `put_connection` counts it back)."""
        if is_writer is True:
            self._num_writers += 1
        elif is_writer is False:
            with self._no_readers:
                self._num_readers += 1

    def _create_connection(self) -> SQLiteConnection:
        try:
            connection = _connect(self.db_name, self._timeout, memory=self.is_sqlite_memory_mode)
        except (sqlite3.Error, TypeError) as exc:
            raise InterfaceError(exc) from exc
        connection.row_factory = sqlite3.Row
        return _TunedConnection(
            sqlite_conn=connection, max_age=self.max_age, checkpointer=self.checkpointer
        )

    def close(self) -> None:
        """Stop the Checkpointer first: the last connection to close then checkpoints the
        rest itself."""
        if self.checkpointer is not None:
            self.checkpointer.close()
        super().close()


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

    def share_checkpoints(self, progress: Progress) -> None:
        """Keep the WAL checkpoints' progress in `progress`, which the worker processes of one
        server share (`shared_progress`, `Checkpointer.share`)."""
        pool = self.datastore.pool
        assert isinstance(pool, TunedSQLitePool)  # put there by __init__
        if pool.checkpointer is not None:
            pool.checkpointer.share(progress)

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        positions = super()._insert_events(c, stored_events, **kwargs)
        self.write_inline(c, positions, kwargs)
        return positions
