"""Which database errors are an outage (503, retry) and which a defect (500)."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from eventsourcing.persistence import (
    ConnectionUnavailableError,
    DataError,
    InterfaceError,
    OperationalError,
)

from titen.storage.outages import is_outage


def wrapped(kind: type[Exception], cause: Exception) -> Exception:
    """As the library raises it: its own class, the driver's error as the cause."""
    try:
        raise kind(str(cause)) from cause
    except kind as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "outage"),
    [
        (wrapped(OperationalError, sqlite3.OperationalError("database is locked")), True),
        (wrapped(OperationalError, sqlite3.OperationalError("unable to open database file")), True),
        (wrapped(OperationalError, sqlite3.OperationalError("no such table: lease_index")), False),
        (wrapped(OperationalError, psycopg.OperationalError("connection refused")), True),
        (wrapped(InterfaceError, psycopg.InterfaceError("the connection is closed")), True),
        (wrapped(DataError, psycopg.DataError("NUL in text")), False),
        (psycopg.OperationalError("server closed the connection unexpectedly"), True),
        (ConnectionUnavailableError("Timed out waiting for connection from pool"), True),
        (OperationalError("Can't do multi-row tracking with single-row tracking table"), False),
    ],
)
def test_only_errors_that_say_not_now_are_outages(error, outage):
    assert is_outage(error) is outage
