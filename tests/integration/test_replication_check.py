"""The standby check after a commit in doubt, when the store stops answering during it.

A fault soak answered a release whose commit had landed "its standby did not confirm it" on a
store with no standby at all: the check's connection had been ended, and a store that could not
be asked was taken for a standby that had not confirmed. It is an unknown outcome of the plain
kind: the database stopped answering.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from titen.storage import replication
from titen.storage.outages import OutcomeUnknown


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
