"""What a database outage looks like to the layers above the store: one tuple of exception types.

The library wraps each driver's errors: a connection refused or dropped, or none got from the
pool within its timeout, is its `OperationalError` (SQLite's "database is locked" past the busy
timeout too), a connection closed under a query its `InterfaceError`. Code that talks to
PostgreSQL through psycopg directly (the follower's LISTEN, key revocations) meets psycopg's own.
Each means "not now": the request changed nothing and may be retried, so the API answers 503.
"""

from __future__ import annotations

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError

OUTAGES: tuple[type[Exception], ...] = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
