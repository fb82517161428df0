"""Synchronous replication's trap: a commit PostgreSQL reports done that its standby may lack.

A commit's wait for a synchronous standby can end early: cancelled, it returns success with only
a WARNING ("... committed locally but might not have been replicated"); terminated (as settling
a lost commit does, storage/settle.py), it commits locally and drops the connection. The change
is then on the primary alone, and a failover would lose an acknowledged write. So a commit that
drew any WARNING (messages are translated: the check decides), and a lost commit found in the
store, count as done only when no synchronous standby is configured or every one (`sync` or
`quorum`) has flushed past it; else NotReplicated, an OutcomeUnknown (503; a retry with the same
Idempotency-Key learns the outcome). Reading the standbys' positions needs `pg_monitor` (or a
superuser): without it, or with the store not answering, the outcome stays unknown.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError

from titen.storage.outages import OutcomeUnknown
from titen.storage.request_budget import left

CONFIRM_SECONDS = 2.0
"""How long a flagged commit may wait for the standbys' flush to pass it before it is unknown
(less when the request's deadline comes first)."""
PAUSE_SECONDS = 0.05
"""Between two looks at the standbys' positions."""
WARNED = "the commit drew a WARNING (its standby's wait cancelled?)"
"""Why a commit whose answer arrived is in doubt."""
_flagged = threading.local()


class NotReplicated(OutcomeUnknown):
    """A commit landed on the primary, but no synchronous standby is known to hold it."""

    answer = (
        "The primary database saved this change but its standby did not confirm it, so the "
        "outcome is unknown (a failover may lose it); retry with the same Idempotency-Key to "
        "learn its outcome."
    )


BLOCKED = (
    "SELECT current_setting('synchronous_standby_names') <> '' AS wanted,"
    " (SELECT count(*) FROM pg_stat_replication"
    "  WHERE sync_state IN ('sync', 'quorum') OR sync_state IS NULL) AS standbys"
)
"""Whether commits wait for a synchronous standby, and how many could confirm them (a
standby's state reads NULL without `pg_monitor`: counted, as it may be one)."""


def blocked(conn: Any) -> str | None:
    """Why no commit can be confirmed now (commits wait for a synchronous standby and none is
    connected: strict synchronous mode with its standby down), or None."""
    row = conn.execute(BLOCKED).fetchone()
    if row["wanted"] and not row["standbys"]:
        return (
            "writes are blocked: every commit waits for a synchronous standby"
            " (synchronous_standby_names) and none is connected"
        )
    return None


def note(diagnostic: Any) -> None:
    """psycopg's notice handler on every pooled connection. It runs in the thread that reads
    the server's answer, so the flag is that thread's: the command whose commit drew it."""
    if diagnostic.severity_nonlocalized == "WARNING":
        _flagged.warned = True


def forget() -> None:
    """Clear this thread's flag before a commit."""
    _flagged.warned = False


def warned() -> bool:
    """Whether this thread's connection drew a WARNING since `forget`."""
    return getattr(_flagged, "warned", False)


def confirm_on(datastore: Any, why: str) -> None:
    """`confirm` on a connection of the library's datastore (its pool); none to be had in
    time leaves the commit in doubt as `asked` does (OutcomeUnknown: it landed, so the plain
    "nothing changed" outage answer would be false)."""
    try:
        with datastore.get_connection() as conn:
            asked(conn, why)
    except OutcomeUnknown:
        raise
    except (OperationalError, InterfaceError, psycopg.Error) as again:
        raise _unanswered(why, again) from None


class Unanswered(OutcomeUnknown):
    """The store stopped answering while a commit's replication was being checked: asking
    again, on another connection, may learn it."""


def _unanswered(why: str, failed: Exception) -> OutcomeUnknown:
    said = "the store stopped answering before it said whether it is replicated"
    return Unanswered(f"{why}, and {said} ({failed})")


def asked(conn: Any, why: str) -> None:
    """`confirm` on `conn`. A store that stops answering leaves the commit in doubt as well,
    but not for want of a standby (there may be none): OutcomeUnknown, whose answer says the
    database stopped answering, not that a standby failed to confirm."""
    try:
        confirm(conn, why)
    except NotReplicated:
        raise
    except (OperationalError, InterfaceError, psycopg.Error) as again:
        raise _unanswered(why, again) from None


def confirm(conn: Any, why: str) -> None:
    """On a pooled connection (dict rows): return if what was committed before this call is
    on every synchronous standby (or none is configured); else NotReplicated, naming `why` the
    commit was in doubt."""
    wanted = conn.execute(
        "SELECT current_setting('synchronous_standby_names') <> '' AS wanted,"
        " pg_current_wal_lsn() AS lsn"
    ).fetchone()
    if not wanted["wanted"]:
        return
    target = wanted["lsn"]
    deadline = time.monotonic() + left(CONFIRM_SECONDS) - PAUSE_SECONDS
    while True:
        row = conn.execute(
            "SELECT count(*) AS standbys,"
            " count(*) FILTER (WHERE flush_lsn >= %s::pg_lsn) AS flushed"
            " FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')",
            [str(target)],
        ).fetchone()
        standbys, flushed = row["standbys"], row["flushed"]
        if standbys and flushed == standbys:
            return
        if time.monotonic() + PAUSE_SECONDS > deadline:
            raise NotReplicated(
                f"{why}, and no synchronous standby is known to hold it "
                f"({flushed} of {standbys} flushed past {target})"
            )
        time.sleep(PAUSE_SECONDS)
