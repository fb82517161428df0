"""The one place that maps a database URL onto the event store's configuration.

`sqlite:///PATH` (relative to the working directory; `sqlite:////abs/path` for an absolute one)
and libpq's URL, `postgresql://USER[:PASSWORD]@HOST[:PORT][,HOST[:PORT]...]/DBNAME[?PARAMS]`,
are understood. Several hosts are libpq's failover list (with `target_session_attrs=read-write`
it connects to whichever is the primary); every query parameter but titen's own `schema=NAME`
is libpq's and reaches every connection titen opens (docs/deployment.md#failover).
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

DEFAULT_URL = "sqlite:///titen.db"
SQLITE_LOCK_TIMEOUT_SECONDS = 10
# Loaded aggregates kept per process (least recently used go first). A cached aggregate is
# brought up to date from the event store on every load ("fast-forward": one query for the
# events after its version), so other processes' writes are always seen and a lost race still
# fails on the version at save. Without it, each load reads the latest snapshot and replays
# up to 99 events after it (a Lease snapshots every 100 events, each acquire adds 2).
AGGREGATE_CACHE_SIZE = 10_000
DEFAULT_POOL_SIZE = 5
"""The most PostgreSQL connections one process holds (`titen serve --pool-size`)."""


# What `?schema=` may name: the library writes it into SQL unquoted, so a plain lowercase
# identifier (PostgreSQL folds unquoted names to lowercase, and cuts them at 63 bytes).
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class BadDatabaseURL(ValueError):
    pass


class CannotOpen(Exception):
    """The database named could not be opened; the message names it and says why."""


@dataclass(frozen=True)
class Database:
    """A parsed database URL, and what the eventsourcing library needs to open it."""

    url: str
    kind: str  # "sqlite" or "postgres"
    path: str = ""
    hosts: tuple[tuple[str, int], ...] = ()
    """Each (host, port) in the URL's order: libpq tries them in turn."""
    options: tuple[tuple[str, str], ...] = ()
    """libpq's parameters from the URL's query (`target_session_attrs`, `sslmode`, ...)."""
    user: str = ""
    password: str = ""
    dbname: str = ""
    schema: str = ""

    def redacted(self) -> str:
        """The URL for logs and people: a password hidden, a SQLite path made absolute (a
        relative one depends on the folder a command ran in)."""
        if self.kind == "sqlite":
            return "sqlite:///" + os.path.abspath(self.path)
        scheme, _, rest = self.url.partition("://")
        authority, slash, tail = rest.partition("/")
        userinfo, at, hosts = authority.rpartition("@")
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        tail = re.sub(r"(?<=[?&]password=)[^&]*", "***", tail)
        return f"{scheme}://{userinfo}{at}{hosts}{slash}{tail}"

    def env(self, pool_size: int = DEFAULT_POOL_SIZE) -> dict[str, str]:
        """The library's settings; on PostgreSQL, `pool_size` is the most connections the
        store opens, none of them before it is needed (storage/deadlines.py closes idle ones)."""
        return {"AGGREGATE_CACHE_MAXSIZE": str(AGGREGATE_CACHE_SIZE), **self._store_env(pool_size)}

    def _store_env(self, pool_size: int) -> dict[str, str]:
        if self.kind == "sqlite":
            # Imported here so that commands which never open a store load no driver.
            from eventsourcing.utils import get_topic

            from titen.storage.sqlite import TunedSQLiteRecorder

            return {
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": self.path,
                "SQLITE_LOCK_TIMEOUT": str(SQLITE_LOCK_TIMEOUT_SECONDS),
                "APPLICATION_RECORDER_TOPIC": get_topic(TunedSQLiteRecorder),
            }
        from eventsourcing.utils import get_topic
        from psycopg.conninfo import make_conninfo

        from titen.storage import deadlines
        from titen.storage.postgres import LIBPQ_OPTIONS, TitenPostgresFactory

        return {
            "PERSISTENCE_MODULE": get_topic(TitenPostgresFactory),
            "POSTGRES_DBNAME": self.dbname,
            # Comma-separated lists, as libpq takes several hosts (the library passes them on).
            "POSTGRES_HOST": self._libpq()["host"],
            "POSTGRES_PORT": self._libpq()["port"],
            LIBPQ_OPTIONS: make_conninfo(**dict(self.options)),
            "POSTGRES_USER": self.user,
            "POSTGRES_PASSWORD": self.password,
            "POSTGRES_SCHEMA": self.schema,
            "POSTGRES_POOL_SIZE": "0",  # the pool's minimum: opened as needed
            "POSTGRES_MAX_OVERFLOW": str(pool_size),  # above the minimum: the budget
            "POSTGRES_LOCK_TIMEOUT": str(deadlines.LOCK_SECONDS),
            "POSTGRES_CONNECT_TIMEOUT": str(deadlines.POOL_WAIT_SECONDS),  # the pool's wait
        }

    @contextmanager
    def migrating(self) -> Iterator[None]:
        """Hold the store's schema lock while its tables are created or changed.

        Server processes started together on one PostgreSQL database would otherwise create
        the library's types and tables at once (a unique violation in pg_type) or alter the same
        table at once (a deadlock). Under a session advisory lock named for the schema they do it
        one after another; the later ones find everything there. The PostgreSQL schema named in
        the URL is created first, as the library expects it to exist. On SQLite an exclusive
        lock on a file beside the store plays the advisory lock's part: the library decides
        what to create before it takes SQLite's write lock, and two processes starting on a new
        file would both record its tracking-table migration (an IntegrityError).
        """
        if self.kind != "postgres":
            self._check_sqlite()
            with open(os.path.abspath(self.path) + ".migrating", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
                self._switch_to_wal()
                yield
            return
        from psycopg import sql

        from titen.storage.deadlines import unbounded

        with self._connect_postgres() as conn, unbounded():
            conn.execute("SELECT pg_advisory_lock(hashtext(%s))", [f"titen:{self.schema}"])
            if self.schema:
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
            yield  # the lock ends with the connection

    def _connect_postgres(self) -> Any:
        """An autocommit connection, or CannotOpen naming the server's reason in one line.

        Connecting once here, before the library's pool exists, fails at once with the cause
        (no such database or role, a refused password, nothing listening), where the pool
        would retry for its timeout and then hide it.
        """
        import psycopg

        try:
            return psycopg.connect(self.conninfo(), autocommit=True)
        except psycopg.OperationalError as exc:
            raise CannotOpen(
                f"cannot open the PostgreSQL database {self.redacted()}: {_cause(exc)}"
            ) from None

    def why_unavailable(self, failure: Exception) -> str:
        """One line for a person: the store named, and why it failed a command.

        A pool that gave up waiting says only that it waited, so on PostgreSQL one connection
        is tried now for the server's own reason (too many clients, a role's limit, nothing
        listening); if that one succeeds, the failure's own first line is all there is.
        """
        if self.kind == "postgres":
            try:
                self._connect_postgres().close()
            except CannotOpen as refused:
                return f"the database is unavailable: {refused}"
        lines = str(failure).strip().splitlines()
        return f"the database {self.redacted()} is unavailable: " + (
            lines[0] if lines else type(failure).__name__
        )

    def _check_sqlite(self) -> None:
        """Refuse, naming the path, a SQLite file that could not be created or written.

        A write transaction is begun and rolled back: it creates the file if it is missing
        (the store is about to be created in it anyway) and fails on a read-only one.
        """
        import sqlite3

        path = os.path.abspath(self.path)
        folder = os.path.dirname(path)
        problem = None
        if not os.path.isdir(folder):
            problem = f"the folder {folder} does not exist"
        else:
            try:
                with closing(sqlite3.connect(path, timeout=SQLITE_LOCK_TIMEOUT_SECONDS)) as conn:
                    conn.execute("BEGIN IMMEDIATE")
                    conn.rollback()
            except sqlite3.Error as exc:
                problem = f"it cannot be written ({exc})"
        if problem:
            raise CannotOpen(f"cannot open the SQLite database {path}: {problem}")

    def _switch_to_wal(self) -> None:
        """Put the SQLite file in WAL mode (it stays so) before the library's connections open
        it, retrying while SQLite refuses.

        The library switches a file that is not yet in WAL mode as it opens each connection,
        but the switch needs the file to itself, and SQLite refuses it at once, without waiting
        out the busy timeout, while another connection uses the file (a process starting beside
        it, in `_check_sqlite`): "database is locked". A file already in WAL mode is left as it
        is.
        """
        import sqlite3

        path = os.path.abspath(self.path)
        deadline = time.monotonic() + SQLITE_LOCK_TIMEOUT_SECONDS
        with closing(sqlite3.connect(path, timeout=SQLITE_LOCK_TIMEOUT_SECONDS)) as conn:
            while True:
                try:
                    conn.execute("PRAGMA journal_mode=WAL")
                    return
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        raise CannotOpen(f"cannot open the SQLite database {path}: {exc}") from exc
                    time.sleep(0.01)

    def conninfo(self) -> str:
        """A libpq connection string for the store: all its hosts, titen's options
        (storage/deadlines.py), then the URL's own, which win."""
        from psycopg.conninfo import make_conninfo

        from titen.storage.deadlines import libpq_options

        return make_conninfo(**{**self._libpq(), **libpq_options(), **dict(self.options)})

    def _libpq(self) -> dict[str, str]:
        """Where and who, as libpq's parameters: hosts and ports as comma-separated lists."""
        return {
            "host": ",".join(host for host, _ in self.hosts),
            "port": ",".join(str(port) for _, port in self.hosts),
            "user": self.user,
            "password": self.password,
            "dbname": self.dbname,
        }


def _cause(exc: Exception) -> str:
    """psycopg's reason for a failed connection, in one line without its preamble; with several
    hosts, each host's reason (psycopg lists them after its first line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    attempts = [_ATTEMPT.match(line) for line in lines]
    each = [f"{m['host']}:{m['port']} {_reason(m['why'])}" for m in attempts if m is not None]
    if len(each) > 1:
        return "; ".join(each)
    reason = _reason(lines[0] if lines else type(exc).__name__)
    if reason.lower() == "connection refused":
        return "connection refused: is PostgreSQL running and accepting TCP/IP connections there?"
    return reason


_ATTEMPT = re.compile(r"- host: '(?P<host>[^']*)', port: '(?P<port>[^']*)'.*?: (?P<why>.*)")
"""One line of psycopg's list of failed attempts, one per host it tried."""


def _reason(line: str) -> str:
    return line.rsplit(" failed: ", 1)[-1].removeprefix("FATAL:").strip()


def parse(url: str) -> Database:
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if not path:
            raise BadDatabaseURL("sqlite URL needs a path: sqlite:///PATH")
        return Database(url=url, kind="sqlite", path=path)
    if not url.startswith(("postgresql://", "postgres://")):
        raise BadDatabaseURL(
            f"unsupported database URL {url!r}: use sqlite:///PATH or "
            "postgresql://USER@HOST:PORT[,HOST:PORT...]/DBNAME"
        )
    base, _, query = url.partition("?")
    # Split, not decoded and encoded again: libpq decodes the rest itself (a `+` stays a `+`).
    parts = [part for part in query.split("&") if part]
    theirs = "&".join(part for part in parts if part.partition("=")[0] != "schema")
    schema = next(
        (unquote(part.partition("=")[2]) for part in parts if part.partition("=")[0] == "schema"),
        "",
    )
    if schema and not SCHEMA_NAME.fullmatch(schema):
        raise BadDatabaseURL(
            f"?schema={schema!r} is not a plain identifier: lowercase letters, digits and _, "
            "not starting with a digit, at most 63"
        )
    libpq = _libpq_parse(base + ("?" + theirs if theirs else ""))
    names = libpq.pop("host", "").split(",")
    ports = _ports(libpq.pop("port", ""))
    if len(ports) == 1:  # libpq's rule: one port serves every host
        ports *= len(names)
    if len(ports) != len(names):
        raise BadDatabaseURL("malformed database URL: give one port, or one for each host")
    hosts = tuple(zip(names, ports, strict=True))
    user, password, dbname = (libpq.pop(name, "") for name in ("user", "password", "dbname"))
    if not (user and dbname and all(host for host, _ in hosts)):
        raise BadDatabaseURL("postgresql URL needs USER@HOST and /DBNAME")
    return Database(
        url=url,
        kind="postgres",
        hosts=hosts,
        options=tuple(libpq.items()),
        user=user,
        password=password,
        dbname=dbname,
        schema=schema,
    )


def _libpq_parse(url: str) -> dict[str, str]:
    """The URL as libpq reads it (its multi-host form, its parameter names checked), or
    BadDatabaseURL with libpq's reason."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        found = conninfo_to_dict(url)
    except ProgrammingError as exc:  # also an unclosed [IPv6] host, or an unknown parameter
        raise BadDatabaseURL(f"malformed database URL: {str(exc).strip()}") from None
    return {name: str(value) for name, value in found.items()}


def _ports(ports: str) -> list[int]:
    """Each host's port (5432 where none is given), or BadDatabaseURL naming a bad one."""
    found = []
    for port in ports.split(","):
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise BadDatabaseURL(f"malformed database URL: port {port!r} is not a port number")
        found.append(int(port or 5432))
    return found
