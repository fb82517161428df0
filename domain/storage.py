"""The one place that maps a database URL onto the event store's configuration.

`sqlite:///PATH` (relative to the working directory; `sqlite:////abs/path` for an absolute one)
and `postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME[?schema=NAME]` are understood.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from eventsourcing.sqlite import (
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteDatastore,
)

DEFAULT_URL = "sqlite:///titen.db"
SQLITE_LOCK_TIMEOUT_SECONDS = 10
SQLITE_PRAGMAS = (
    # WAL (which the library turns on) with synchronous=NORMAL: a commit no longer waits for an
    # fsync; the WAL is synced at each checkpoint. The database stays consistent after any
    # crash and a crash of the process loses nothing; an OS crash or power cut can lose the
    # commits since the last checkpoint. It is SQLite's recommended setting for WAL. FULL (the
    # default) costs an fsync per commit, two per acquire: on the benchmark machine that more
    # than halved acquires per second (docs/performance.md).
    "PRAGMA synchronous=NORMAL",
)
# Loaded aggregates kept per process (least recently used go first). A cached aggregate is
# brought up to date from the event store on every load ("fast-forward": one query for the
# events after its version), so other processes' writes are always seen and a lost race still
# fails on the version at save. Without it, each load reads the latest snapshot and replays
# the events after it: up to 99 (a Lease snapshots every 100 events, each acquire adds 2), which
# made re-acquiring a busy resource about 2.5x the cost of a new one (docs/performance.md).
AGGREGATE_CACHE_SIZE = 10_000
# The library's SQLite pool keeps 5 connections and closes any more as they come back, so a
# server with 16 request threads kept opening new ones; pool connections open lazily.
SQLITE_POOL_SIZE = 32
POSTGRES_LOCK_TIMEOUT_SECONDS = 10


class BadDatabaseURL(ValueError):
    pass


@dataclass(frozen=True)
class Database:
    """A parsed database URL, and what the eventsourcing library needs to open it."""

    url: str
    kind: str  # "sqlite" or "postgres"
    path: str = ""
    host: str = ""
    port: int = 5432
    user: str = ""
    password: str = ""
    dbname: str = ""
    schema: str = ""

    def redacted(self) -> str:
        """The URL with any password hidden, for logs."""
        parts = urlsplit(self.url)
        if not parts.password:
            return self.url
        return self.url.replace(f":{parts.password}@", ":***@", 1)

    def env(self, pool_size: int = 10) -> dict[str, str]:
        return {"AGGREGATE_CACHE_MAXSIZE": str(AGGREGATE_CACHE_SIZE), **self._store_env(pool_size)}

    def _store_env(self, pool_size: int) -> dict[str, str]:
        if self.kind == "sqlite":
            return {
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": self.path,
                "SQLITE_LOCK_TIMEOUT": str(SQLITE_LOCK_TIMEOUT_SECONDS),
                "APPLICATION_RECORDER_TOPIC": "domain.storage:TunedSQLiteRecorder",
            }
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": self.dbname,
            "POSTGRES_HOST": self.host,
            "POSTGRES_PORT": str(self.port),
            "POSTGRES_USER": self.user,
            "POSTGRES_PASSWORD": self.password,
            "POSTGRES_SCHEMA": self.schema,
            "POSTGRES_POOL_SIZE": str(pool_size),
            "POSTGRES_MAX_OVERFLOW": str(pool_size),
            "POSTGRES_LOCK_TIMEOUT": str(POSTGRES_LOCK_TIMEOUT_SECONDS),
            "POSTGRES_CONNECT_TIMEOUT": "5",
        }

    def ensure_schema(self) -> None:
        """Create the PostgreSQL schema named in the URL; the library expects it to exist."""
        if self.kind != "postgres" or not self.schema:
            return
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
            )

    def conninfo(self) -> str:
        from psycopg.conninfo import make_conninfo

        return make_conninfo(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            dbname=self.dbname,
            connect_timeout=5,
        )


def parse(url: str) -> Database:
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if not path:
            raise BadDatabaseURL("sqlite URL needs a path: sqlite:///PATH")
        return Database(url=url, kind="sqlite", path=path)
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise BadDatabaseURL(
            f"unsupported database URL {url!r}: use sqlite:///PATH or "
            "postgresql://USER@HOST:PORT/DBNAME"
        )
    dbname = parts.path.lstrip("/")
    if not (parts.hostname and parts.username and dbname):
        raise BadDatabaseURL("postgresql URL needs USER@HOST and /DBNAME")
    schema = parse_qs(parts.query).get("schema", [""])[0]
    return Database(
        url=url,
        kind="postgres",
        host=parts.hostname,
        port=parts.port or 5432,
        user=unquote(parts.username),
        password=unquote(parts.password or ""),
        dbname=dbname,
        schema=schema,
    )


class TunedSQLitePool(SQLiteConnectionPool):
    """The library's SQLite pool, with SQLITE_PRAGMAS run on every connection it opens."""

    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        for pragma in SQLITE_PRAGMAS:
            connection._sqlite_conn.execute(pragma)
        return connection


class TunedSQLiteRecorder(SQLiteApplicationRecorder):
    """The library's SQLite event recorder; constructing it tunes the datastore it shares.

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
