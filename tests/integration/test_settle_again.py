"""Settling a lost commit on a connection that is itself lost tries again on another.

Under a storm of ended connections the settling connection was often ended too (or had been
while it sat in the pool), and the outcome was answered unknown at once: 29-34% of the 503s in
bench/kill_storm.py. Settling now asks again, within its bound and the request's deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import psycopg
from eventsourcing.persistence import OperationalError
from psycopg.rows import dict_row

from titen.storage.settle import settle_transaction


class EndedFirst:
    """A datastore whose pool first hands out a connection whose session was ended while it
    sat idle, then live ones; psycopg's errors become the library's, as its pool's do."""

    def __init__(self, conninfo: str):
        self.conninfo = conninfo
        self.handed = 0

    @contextmanager
    def get_connection(self) -> Iterator[psycopg.Connection]:
        self.handed += 1
        with psycopg.connect(self.conninfo, autocommit=True, row_factory=dict_row) as conn:
            if self.handed == 1:
                with psycopg.connect(self.conninfo, autocommit=True) as operator:
                    operator.execute(
                        "SELECT pg_terminate_backend(%s, 5000)", [conn.info.backend_pid]
                    )
            try:
                yield conn
            except psycopg.OperationalError as lost:
                raise OperationalError(str(lost)) from lost


def test_a_settling_connection_that_is_lost_too_is_replaced_and_the_outcome_learnt(
    postgres_database,
):
    conninfo = postgres_database.split("?", 1)[0]
    with psycopg.connect(conninfo, autocommit=True) as committed, committed.transaction():
        xid = committed.execute("SELECT pg_current_xact_id()::text").fetchone()[0]
    datastore = EndedFirst(conninfo)
    lost = SimpleNamespace(session=None)
    settle_transaction(datastore, lost, xid, OperationalError("the COMMIT's answer was lost"))
    assert datastore.handed == 2  # the ended connection failed; the next one learnt it landed
