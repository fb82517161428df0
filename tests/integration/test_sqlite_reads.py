"""SQLite's reads made for every request: one statement each, on the warmest connection.

A lone SELECT needs no BEGIN and ROLLBACK around it on the library's autocommit connections, and
a failing one is still raised as the library's error. The pool hands out the connection returned
last, whose page cache is the one most likely still valid (a queue used each connection in turn,
each reading its pages again).
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from eventsourcing.persistence import OperationalError

from titen.service.bootstrap import Services, bootstrap

ACQUIRE = {"organization": "acme", "holder": "agent_a", "resource_type": "deploy"}
ACQUIRE |= {"resource_id": "svc", "purpose": "p", "ttl_seconds": 60}


# The `services` of tests/conftest.py, on SQLite only.
pytestmark = pytest.mark.backends("sqlite")


def traced(services: Services) -> list[str]:
    """The statements run from now on every connection the store's pool holds or opens."""
    statements: list[str] = []
    pool = services.store.datastore.pool
    connections = [pool.get_connection() for _ in range(3)]  # opens some, if the pool has fewer
    for conn in connections:
        pool.put_connection(conn)
    for conn in connections:
        conn._sqlite_conn.set_trace_callback(statements.append)
    return statements


def test_a_read_is_one_statement(services):
    statements = traced(services)
    services.store.query("SELECT revision FROM {api_key_revision}")
    assert statements == ["SELECT revision FROM api_key_revision"]


def test_a_failing_read_is_raised_as_the_librarys_error(services):
    with pytest.raises(OperationalError) as raised:
        services.store.query("SELECT * FROM no_such_table")
    assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
    assert services.store.query("SELECT revision FROM {api_key_revision}")  # still serves


def test_the_connection_returned_last_is_taken_first(services):
    pool = services.store.datastore.pool
    first, second = pool.get_connection(), pool.get_connection()
    pool.put_connection(first)
    pool.put_connection(second)
    again = pool.get_connection()
    pool.put_connection(again)
    assert again is second


def test_each_connection_keeps_every_statement_of_a_command_prepared(tmp_path, monkeypatch):
    """The library opens its connections with `cached_statements=True`, a cache of one
    statement, so each of a command's statements was prepared again (storage/sqlite.py)."""
    sizes: list[int] = []
    connect = sqlite3.connect

    def spy(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        sizes.append(kwargs.get("cached_statements", 128))
        return connect(*args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", spy)
    opened = bootstrap(f"sqlite:///{tmp_path}/titen.db", pool_size=4)
    try:
        statements = traced(opened)
        opened.app.acquire_lease(**ACQUIRE)
    finally:
        opened.close()
    assert sizes and min(sizes) >= len(statements) > 5  # an acquire's, its values bound
