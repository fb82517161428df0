"""How long titen waits on PostgreSQL, and how many connections it keeps: the pool's tuning.

A request never waits more than about 10 s on a database that does not answer, and a process
holds no more connections than `--pool-size`. The library's pool uses libpq's defaults (a connect
may wait 130 s per host, a query on a dead link for ever) and tries every read ten times, so each
wait gets its own bound here: a pooled connection POOL_WAIT_SECONDS (then 503), a connect
CONNECT_SECONDS, each answer ANSWER_SECONDS (`DeadlineConnection`; KEEPALIVE is the kernel's
second line), the events table's lock LOCK_SECONDS. Inside a request every wait also ends by
its deadline (storage/request_budget.py); opening a store runs `unbounded()`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors

from titen.storage import replication
from titen.storage.request_budget import left

POOL_WAIT_SECONDS = 4
"""How long a command waits for a pooled connection before it is told 503."""
CONNECT_SECONDS = 3
"""libpq's connect_timeout (whole seconds, at least 2): opening one connection."""
ANSWER_SECONDS = 8.0
"""The most one round trip to the server may take, measured by the client."""
LOCK_SECONDS = 5
"""PostgreSQL's lock_timeout: a command waiting for the events table (held by a transaction
that is stuck) gives up after this."""
IDLE_SECONDS = 30.0
"""A pooled connection unused this long is closed (psycopg_pool closes one per such period)."""
KEEPALIVE = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 2,
    "tcp_user_timeout": int(ANSWER_SECONDS * 1000),
}
"""libpq's TCP settings: a link that dies while idle (a LISTEN connection) is noticed in about
9 s, and data unacknowledged for ANSWER_SECONDS breaks the connection in the kernel."""
_patient = threading.local()


def libpq_options() -> dict[str, Any]:
    """What every connection titen opens passes to libpq, besides where and who; the
    application name shows in pg_stat_activity which titen process holds a connection."""
    return {
        "connect_timeout": CONNECT_SECONDS,
        "application_name": f"titen {os.getpid()}",
        **KEEPALIVE,
    }


class DeadlineConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait for the server ends after ANSWER_SECONDS.

    psycopg waits for an answer for ever unless given a timeout; waits that carry their own
    (LISTEN's `notifies`) keep it. A wait that runs out closes the connection (its protocol
    state is unknown: the answer may still come) and raises psycopg's OperationalError, which is
    an outage to the rest of titen; the pool drops the closed connection when it is returned.
    """

    session: tuple[int, Any] | None = None
    """The server's process id and session start (pg_stat_activity's pid and backend_start),
    read once when the connection opens: what names its session once the connection is lost."""

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        if timeout is not None or getattr(_patient, "active", False):
            return super().wait(gen, interval=interval, timeout=timeout)
        bound = max(left(ANSWER_SECONDS), 0.001)
        try:
            return super().wait(gen, interval=interval, timeout=bound)
        except errors._WaitTimeout:
            self.pgconn.finish()
            raise psycopg.OperationalError(
                f"the database did not answer within {bound:.3g} s"
            ) from None


@contextmanager
def unbounded() -> Iterator[None]:
    """No answer deadline for this thread's queries meanwhile (schema changes at start-up)."""
    _patient.active = True
    try:
        yield
    finally:
        _patient.active = False


def tune(pool: Any, options: dict[str, Any]) -> None:
    """Give the library's pool (not yet opened) titen's connection class, options and waits,
    then the database URL's own libpq `options`, which win.

    The pool's sizes come from the library's settings (Database.env): none opened at start,
    at most the budget. Giving up on a connection that cannot be opened after
    POOL_WAIT_SECONDS (rather than psycopg_pool's 5 minutes of retries) lets the next command
    that needs one try again at once, so a pool recovers within seconds of the database.
    """
    pool.connection_class = DeadlineConnection
    pool.getconn = _bounded(pool.getconn)
    pool._configure = _noting_session(pool._configure)
    pool.kwargs.update(libpq_options())
    pool.kwargs.update(options)
    pool.max_idle = IDLE_SECONDS
    pool.reconnect_timeout = float(POOL_WAIT_SECONDS)


def _bounded(getconn: Any) -> Any:
    """psycopg_pool's getconn (which its `connection()` calls), its wait for a connection
    ending at the request's deadline too."""

    def bounded(timeout: float | None = None) -> Any:
        return getconn(timeout=left(POOL_WAIT_SECONDS if timeout is None else timeout))

    return bounded


def _noting_session(configure: Any) -> Any:
    """The pool's hook for a new connection, which then also notes the connection's session
    and hands its notices to storage/replication.py."""

    def configured(conn: DeadlineConnection) -> None:
        if configure is not None:
            configure(conn)
        conn.add_notice_handler(replication.note)  # a commit's WARNING (storage/replication.py)
        row = conn.execute(
            "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ).fetchone()
        assert row is not None  # a session always sees its own row
        conn.session = (row["pid"], row["backend_start"])

    return configured
