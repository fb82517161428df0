"""Whether a database error means "not now" (an outage: retry) rather than a defect.

The library wraps each driver's errors, and its `OperationalError` covers both kinds: from
psycopg, a connection refused or dropped, or none got from the pool in time (psycopg's
`OperationalError` and `InterfaceError`, lock and statement timeouts included); from sqlite3, a
database locked past the busy timeout or not openable, but also a missing table (a defect). So
the driver's own error, at the end of the `__cause__` chain, decides; code using psycopg directly
(the follower's LISTEN, key revocations) raises its errors unwrapped. An outage changed nothing,
so the API answers 503. psycopg is looked up, not imported: a process on SQLite never loads it
(a fifth of a server's start's CPU), and none of its errors can exist where it was never loaded.
"""

from __future__ import annotations

import logging
import sqlite3
import sys

from eventsourcing.persistence import ConnectionUnavailableError, OperationalError

SQLITE_OUTAGES = (
    "database is locked",
    "database table is locked",
    "unable to open",
    "disk i/o",
    "database or disk is full",  # the transaction rolled back; writes resume with space
)


def is_outage(exc: BaseException) -> bool:
    if isinstance(exc, OutcomeUnknown | NotCommitted):
        return True  # raised by titen itself, with or without a driver's error behind it
    psycopg = sys.modules.get("psycopg")
    cause: BaseException | None = exc
    while cause is not None:
        if psycopg is not None and isinstance(cause, psycopg.Error):
            return isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError)
        if isinstance(cause, sqlite3.Error):
            message = str(cause).lower()
            return isinstance(cause, sqlite3.OperationalError) and any(
                text in message for text in SQLITE_OUTAGES
            )
        cause = cause.__cause__
    # No pool connection free in time, or a node whose clock the database's disagreed with.
    return isinstance(exc, ConnectionUnavailableError | ClockDisagrees)


class NotCommitted(OperationalError):
    """A commit's answer was lost, and the store shows it did not land: nothing changed."""


class OutcomeUnknown(OperationalError):
    """A commit's answer was lost, and the store could not tell whether it landed: the change
    may have been saved. An Idempotency-Key retried later returns the original outcome."""

    answer = (
        "The database stopped answering while this change was being saved, and could not "
        "tell whether it was; retry with the same Idempotency-Key to learn its outcome."
    )
    """What the API tells the caller (503 UNAVAILABLE)."""


class ClockDisagrees(OperationalError):
    """A command's instants disagreed with the database's clock read in its transaction (ahead
    of it, or too far behind: storage/clock.py): the transaction rolled back, nothing changed."""


def log_failure(log: logging.Logger, doing: str, exc: BaseException) -> None:
    """Log a background loop's failure before it retries: an outage is a condition, one
    warning line without a traceback (it ends by itself); anything else is a defect, with one."""
    if is_outage(exc):
        lines = str(exc).strip().splitlines()
        log.warning("%s: the database is unavailable (%s)", doing, lines[0] if lines else exc)
    else:
        log.exception("%s", doing)
