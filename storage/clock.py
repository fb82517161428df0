"""The database's clock: what every command decides and records by on PostgreSQL.

Nodes sharing one database must agree on time (a fast clock takes a live lease as expired, a
slow one records instants early), so on PostgreSQL every service's `Clock` is the server's
`clock_timestamp()`, read every REANCHOR_SECONDS (the anchor) and carried forward in between by
`time.monotonic()`, which setting the wall clock does not move. The estimate is never ahead of
the database: a reading is paired with the monotonic time at the END of its round trip. Each
command's transaction checks its instants against the database's clock under the events table's
lock (`verify`): a wrong one rolls back as ClockDisagrees and the command runs again on a new
anchor (service/application.py), so a wrong instant is never recorded and never grants anything.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from titen.domain.clock import iso, truncate
from titen.storage.outages import ClockDisagrees

log = logging.getLogger("titen.clock")
REANCHOR_SECONDS = 10.0
"""How long one anchor is used before the database's clock is read again: short enough that
drift between the two clocks stays far below a millisecond."""
STALE_SECONDS = 15.0
"""How far before the database's clock a command's instant may be when it is saved: a node
paused longer than this between deciding and saving decides again."""


@dataclass(frozen=True)
class Anchor:
    database: datetime
    """The server's clock_timestamp()."""
    at: float
    """time.monotonic() when the answer carrying it arrived."""


class DatabaseClock:
    """The database server's clock as this process estimates it (see the module's doc)."""

    def __init__(
        self,
        read: Callable[[], datetime],
        *,
        monotonic: Callable[[], float] = time.monotonic,
        reanchor_seconds: float = REANCHOR_SECONDS,
    ):
        """`read()` returns the server's clock_timestamp() (one round trip)."""
        self._read = read
        self._monotonic = monotonic
        self._reanchor_seconds = reanchor_seconds
        self._anchor: Anchor | None = None
        self._refreshing = False
        self._lock = threading.Lock()

    @classmethod
    def of(cls, datastore: Any) -> DatabaseClock:
        """The clock of the PostgreSQL server behind the library's datastore (its pool)."""

        def read() -> datetime:
            with datastore.get_connection() as conn:
                row = conn.execute("SELECT clock_timestamp() AS now").fetchone()
            instant: datetime = row["now"]
            return instant.astimezone(UTC)

        return cls(read)

    def now(self) -> datetime:
        anchor = self._current()
        return truncate(anchor.database + timedelta(seconds=self._monotonic() - anchor.at))

    def _current(self) -> Anchor:
        """The anchor to estimate from. A due one is read anew in the background while every
        thread goes on with it (still checked by every transaction): the caller may be inside
        a transaction that holds the events table's lock and a pooled connection, and reading
        there would take a second connection, which a busy pool may not have (a 4 s stall, then
        503, with the lock held). With none at all (at start, after a refusal), each reads its
        own."""
        with self._lock:
            anchor = self._anchor
            due = anchor is not None and self._monotonic() - anchor.at >= self._reanchor_seconds
            refresh = due and not self._refreshing
            self._refreshing = self._refreshing or refresh
        if refresh:
            threading.Thread(target=self._refresh, name="clock-anchor", daemon=True).start()
        return anchor if anchor is not None else self.anchor()

    def _refresh(self) -> None:
        try:
            self.anchor()
        except Exception as exc:  # the next due estimate tries again; every save is checked
            log.warning("reading the database's clock failed: %s", exc)
        finally:
            with self._lock:
                self._refreshing = False

    def anchor(self) -> Anchor:
        """Read the database's clock and estimate from it from now on."""
        instant = self._read()
        fresh = Anchor(instant, self._monotonic())  # after the answer arrived: never ahead
        with self._lock:
            self._anchor = fresh
        return fresh

    def verify(self, database: datetime, instants: Iterable[datetime]) -> None:
        """Raise ClockDisagrees, and read the database's clock again before the next instant,
        if one of a command's instants is after `database` (clock_timestamp() in the command's
        transaction, its answer just arrived) or more than STALE_SECONDS before it; else take
        `database` as the anchor if it trails less than the anchor does."""
        at, database = self._monotonic(), database.astimezone(UTC)
        earliest = database - timedelta(seconds=STALE_SECONDS)
        for instant in instants:
            if instant > database:
                problem = "ahead of"
            elif instant < earliest:
                problem = f"more than {STALE_SECONDS:g} s behind"
            else:
                continue
            with self._lock:
                self._anchor = None
            raise ClockDisagrees(
                f"an instant of this command ({iso(instant)}) is {problem} the database's "
                f"clock ({iso(database)}); nothing was saved"
            )
        with self._lock:
            anchor = self._anchor
            if anchor is not None and database > anchor.database + timedelta(
                seconds=at - anchor.at
            ):
                self._anchor = Anchor(database, at)


ClockCheck = Callable[[datetime, Iterable[datetime]], None]
"""`DatabaseClock.verify`, as the recorder calls it."""
