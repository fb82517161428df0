"""A command's transaction on PostgreSQL waits on the server twice (storage/postgres.py):
BEGIN, the lock, the insert (which returns the database's clock); then the read models and
COMMIT. psycopg's
`transaction()` in pipeline mode waited six times, three of them for nothing (BEGIN alone, two
empty syncs at its end), and the clock's check a fourth before the COMMIT.

It sends seven statements: each costs the client about 20 us of CPU, so the lock's timeout and
NOTIFY go as one, the clock comes back with the insert, and the read models' rows go as one
statement (projections/store.py); it was twelve.
"""

from __future__ import annotations

import itertools
import tempfile
from typing import Any

from psycopg import pq

from titen.service.bootstrap import Services, bootstrap


def acquire(services: Services, resource: str) -> Any:
    return services.app.acquire_lease(
        organization="acme",
        holder="agent_alice",
        resource_type="deploy",
        resource_id=resource,
        purpose="p",
        ttl_seconds=60,
    )


def waits(trace: str) -> int:
    """How many times the client waited on the server in a libpq trace: each run of messages
    it sent (F) that the server's answer (B) follows."""
    sides = [line.split("\t", 1)[0] for line in trace.splitlines()]
    return sum(1 for pair in itertools.pairwise(sides) if pair == ("F", "B"))


def traced_acquire(postgres_database: str) -> str:
    """libpq's trace of one acquire's transaction on a store whose commands decide by the
    database's clock (so the clock is read and checked)."""
    # One pooled connection: the command's.
    services = bootstrap(postgres_database, pool_size=1)
    try:
        acquire(services, "warm")  # the clock's anchor is read now, not in the traced command
        pool = services.app.recorder.datastore.pool
        with tempfile.TemporaryFile("w+") as trace:
            with pool.connection() as conn:
                conn.pgconn.trace(trace.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            acquire(services, "traced")
            with pool.connection() as conn:
                conn.pgconn.untrace()
            trace.seek(0)
            text = trace.read()
    finally:
        services.close()
    assert '"BEGIN"' in text and '"COMMIT"' in text and "clock_timestamp()" in text
    return text


def test_an_acquire_waits_on_the_server_twice(postgres_database: str):
    assert waits(traced_acquire(postgres_database)) == 2


def test_an_acquire_sends_seven_statements(postgres_database: str):
    text = traced_acquire(postgres_database)
    sent = [line for line in text.splitlines() if line.startswith("F\t") and "\tExecute\t" in line]
    assert len(sent) == 7, text
