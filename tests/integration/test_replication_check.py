"""The standby check after a commit in doubt, when the store stops answering during it.

A fault soak answered a release whose commit had landed "its standby did not confirm it" on a
store with no standby at all: the check's connection had been ended, and a store that could not
be asked was taken for a standby that had not confirmed. It is an unknown outcome of the plain
kind: the database stopped answering. And the check now runs on the connection that found the
commit, which has just answered, not on another from the pool.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import psycopg
import pytest
from eventsourcing.persistence import OperationalError
from psycopg.rows import dict_row

from titen.storage import replication
from titen.storage.outages import OutcomeUnknown
from titen.storage.settle import settle_transaction


def test_a_check_whose_connection_is_ended_is_an_unknown_outcome_not_a_standby_refusal(
    postgres_database,
):
    conninfo = postgres_database.split("?", 1)[0]
    with psycopg.connect(conninfo, autocommit=True, row_factory=dict_row) as checked:
        replication.asked(checked, "a commit")  # answers: no standby configured, nothing to wait
        pid = checked.info.backend_pid
        with psycopg.connect(conninfo, autocommit=True) as operator:
            operator.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        with pytest.raises(OutcomeUnknown) as raised:
            replication.asked(checked, "a commit")
    assert not isinstance(raised.value, replication.NotReplicated)
    assert "stopped answering" in str(raised.value)


class OneConnection:
    """A datastore whose pool hands out one working connection, then only dead ones (as a pool
    whose idle connections were ended while they sat in it)."""

    def __init__(self, conninfo: str):
        self.conninfo = conninfo
        self.handed = 0

    @contextmanager
    def get_connection(self) -> Iterator[psycopg.Connection]:
        self.handed += 1
        if self.handed > 1:
            raise OperationalError("the pooled connection was ended while it sat idle")
        with psycopg.connect(self.conninfo, autocommit=True, row_factory=dict_row) as conn:
            yield conn


def test_a_lost_commit_found_committed_is_checked_on_the_connection_that_found_it(
    postgres_database,
):
    conninfo = postgres_database.split("?", 1)[0]
    with psycopg.connect(conninfo, autocommit=True) as committed:
        xid = committed.execute("SELECT pg_current_xact_id()::text").fetchone()[0]
    lost = SimpleNamespace(session=None)
    datastore = OneConnection(conninfo)
    settle_transaction(datastore, lost, xid, OperationalError("the COMMIT's answer was lost"))
    assert datastore.handed == 1  # settled as committed, with no second connection asked for


def test_no_connection_for_the_check_is_an_unknown_outcome_not_an_outage(postgres_database):
    datastore = OneConnection(postgres_database.split("?", 1)[0])
    datastore.handed = 1  # the pool has only dead connections left
    with pytest.raises(OutcomeUnknown) as raised:
        replication.confirm_on(datastore, "a commit that drew a WARNING")
    assert not isinstance(raised.value, replication.NotReplicated)
