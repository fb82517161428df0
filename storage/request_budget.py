"""A request's one deadline over every wait it makes on the database, commit and settling included.

Each wait has its own bound (storage/deadlines.py), but a request makes several: a connection,
the events table's lock, the commit (which a synchronous standby may hold for ever), settling a
commit whose answer was lost, the standbys' check. Inside `request()` each ends by the one
deadline, and a commit's waits end SETTLE_SECONDS earlier (`committing()`), so that the commit
is still settled, within the deadline, when its answer does not come in time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from titen.storage.outages import NotCommitted

REQUEST_SECONDS = 10.0
"""Every answer to a request that reads or writes the database comes within this: waits for
a connection, a lock, an answer, a standby, and settling a lost commit, all together."""
DATABASE_SECONDS = REQUEST_SECONDS - 0.5
"""The request's deadline for its work with the database: the rest answers the request."""
SETTLE_SECONDS = 3.0
"""Kept back from a commit's waits: settling a commit whose answer was lost (ending its
session, finding it, asking the standbys) runs in it."""
MIN_COMMIT_SECONDS = 0.2
"""A commit with less than this left before its deadline is not begun (nothing changes)."""
_request = threading.local()


def start(seconds: float = DATABASE_SECONDS) -> None:
    """From now on, this thread's database waits end `seconds` from now in all (until `end`)."""
    _request.at = time.monotonic() + seconds
    _request.committing = False


def end() -> None:
    """This thread's waits have their own bounds only again."""
    _request.at = None


@contextmanager
def request(seconds: float) -> Iterator[None]:
    """This thread's database waits meanwhile end `seconds` from now in all, or sooner when
    the request this runs in ends sooner."""
    outer = getattr(_request, "at", None)
    _request.at = time.monotonic() + seconds
    if outer is not None:
        _request.at = min(_request.at, outer)
    try:
        yield
    finally:
        _request.at = outer


@contextmanager
def committing() -> Iterator[None]:
    """A write transaction runs meanwhile: its waits end SETTLE_SECONDS before the request's
    deadline. NotCommitted at once when too little is left to begin it."""
    if left(float("inf"), SETTLE_SECONDS) < MIN_COMMIT_SECONDS:
        raise NotCommitted(f"the request's {REQUEST_SECONDS:g} s ran out before its commit began")
    outer = getattr(_request, "committing", False)
    _request.committing = True
    try:
        yield
    finally:
        _request.committing = outer


def left(bound: float, reserve: float | None = None) -> float:
    """`bound`, or less: what is left of this thread's request (less what a commit keeps for
    settling), never below 0; `bound` outside a request."""
    at = getattr(_request, "at", None)
    if at is None:
        return bound
    if reserve is None:
        reserve = SETTLE_SECONDS if getattr(_request, "committing", False) else 0.0
    return max(0.0, min(bound, at - reserve - time.monotonic()))
