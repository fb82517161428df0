"""Settling a PostgreSQL commit whose answer was lost: did it land, before anything is answered.

When the connection drops (or stops answering) after COMMIT was sent, the commit may or may not
have landed, or may still be in flight. Running the change again could make it twice; answering
503 could deny a change that happened. So the lost connection's session is ended on the server
first (`pg_terminate_backend` waits until it is gone: nothing in flight can land afterwards), and
only then is the store asked. The event recorder looks for its own events (storage/postgres.py);
every other write transaction (the view store's keys, tickets, webhook subscriptions, stored
answers) asks `pg_xact_status` of its transaction id, read as its first statement.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from eventsourcing.persistence import InterfaceError, OperationalError

from titen.storage import replication
from titen.storage.outages import NotCommitted, OutcomeUnknown
from titen.storage.request_budget import SETTLE_SECONDS, left

T = TypeVar("T")

END_SESSION_MS = 3000
"""How long settling waits for the server to end the session of a commit whose answer was
lost; past that the outcome is unknown."""
TRANSACTION_ID = "SELECT pg_current_xact_id()::text AS xid"
AGAIN_SECONDS = 0.05
"""The pause before settling again on another connection when the settling one was lost."""
"""A write transaction's first statement: the id that names it once its connection is lost."""


def answer_lost(conn: Any) -> bool:
    """Whether a connection that failed a call is gone (closed, or broken mid-answer), so that a
    COMMIT sent on it may have landed unseen; a connection still good got the server's error."""
    return bool(conn.closed or conn.broken)


def end_session(conn: Any, session: tuple[int, Any] | None) -> bool:
    """End the server's session of a lost connection, waiting for it to be gone, so that a
    commit still in flight there cannot land after the store was looked at. True when it is
    gone (or was already)."""
    if session is None:
        return False
    waited = max(1, int(left(END_SESSION_MS / 1000) * 1000))
    row = conn.execute(
        "SELECT pg_terminate_backend(pid, %s) AS ended FROM pg_stat_activity"
        " WHERE pid = %s AND backend_start = %s",
        [waited, *session],
    ).fetchone()
    return row is None or bool(row["ended"])


def again_while_lost(settle: Callable[[], T], failed: Exception) -> T:
    """`settle()`, run again on another connection while its own is lost (ended too, as the
    lost one was, or dead in the pool), within SETTLE_SECONDS and the request's deadline;
    then OutcomeUnknown. An outcome it learnt, NotReplicated included, is its answer."""
    until = time.monotonic() + left(SETTLE_SECONDS)
    while True:
        try:
            return settle()
        except OutcomeUnknown as unknown:
            if not isinstance(unknown, replication.Unanswered) or not _time_for_more(until):
                raise
        except (OperationalError, InterfaceError) as again:
            if isinstance(again, NotCommitted) or not _time_for_more(until):
                raise OutcomeUnknown(
                    f"the commit's answer was lost ({failed}) and the store did not answer "
                    f"whether it landed ({again})"
                ) from failed
        time.sleep(AGAIN_SECONDS)


def _time_for_more(until: float) -> bool:
    return time.monotonic() + AGAIN_SECONDS < until


def settle_transaction(datastore: Any, lost: Any, xid: str, failed: Exception) -> None:
    """Return if the transaction `xid`, whose COMMIT's answer was lost on connection `lost`,
    committed (and, with synchronous standbys, they hold it: ending its session commits a
    commit that waited for them on the primary alone); else raise NotCommitted (it did not:
    nothing changed), or OutcomeUnknown (the store could not tell in time, or a standby lacks
    it)."""
    status = again_while_lost(lambda: _status(datastore, lost, xid, failed), failed)
    if status == "aborted":  # final, as "committed" is: only "in progress" could still change
        raise NotCommitted(f"the commit did not land: {failed}") from failed
    if status != "committed":
        raise OutcomeUnknown(
            f"the commit's answer was lost ({failed}) and its transaction is still {status}"
        ) from failed


def _status(datastore: Any, lost: Any, xid: str, failed: Exception) -> str | None:
    """The transaction's status once its session has ended, checked on the standbys when it
    committed."""
    with datastore.get_connection() as conn:
        end_session(conn, getattr(lost, "session", None))
        row = conn.execute("SELECT pg_xact_status(%s::xid8) AS status", [xid]).fetchone()
        if row and row["status"] == "committed":
            # On this connection, known to answer: a pooled one may be a dead one.
            replication.asked(conn, f"a commit whose answer was lost ({failed}) landed")
    return row["status"] if row else None
