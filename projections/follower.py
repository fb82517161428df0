"""One thread per server process that learns of new commits and wakes subscribers.

Read models are written with each command, so the follower only hands new rows of the event log
to this process's streams and long-polls (projections/recent_events.py), one read per commit for
all of them. On PostgreSQL it wakes on the event store's NOTIFY (one LISTEN connection per
process, a poll as the safety net). SQLite has no notifications: it polls often (one indexed
query) and is nudged by this process's commits that a subscriber here waits for, not by others.
While nothing wants it (no subscriber here, nothing else `needed`, such as the webhook doorbell
while an enabled webhook exists) it sleeps: it neither listens nor polls, and no commit costs a
wake. A first subscriber or `wake()` starts it again; it also looks every SAFETY_POLL_SECONDS.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from eventsourcing.sqlite import SQLiteApplicationRecorder

from titen.projections.recent_events import RecentEvents
from titen.storage.outages import log_failure

log = logging.getLogger("titen.follower")
SAFETY_POLL_SECONDS = 1.0
SQLITE_POLL_SECONDS = 0.02


class Follower:
    def __init__(
        self, recorder: Any, recent: RecentEvents, needed: Callable[[], bool] = lambda: False
    ):
        """`needed()`: whether something besides this process's subscribers wants every
        commit's news now (the `on_notify` listeners)."""
        self.recorder = recorder
        self.recent = recent
        self.needed = needed
        self._listens = not isinstance(recorder, SQLiteApplicationRecorder)  # PostgreSQL NOTIFYs
        self._stop = threading.Event()
        self._nudged = threading.Event()
        self._thread = threading.Thread(target=self._run, name="follower", daemon=True)
        self.on_notify: list[Callable[[], None]] = []
        """Called on every PostgreSQL notification of a commit (any process's), and on each
        safety poll (the webhook workers' doorbell), while the follower is wanted."""
        recent.on_first_subscriber.append(self.wake)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._nudged.set()
        self._thread.join(timeout=5)

    def nudge(self, position: int, organizations: frozenset[str]) -> None:
        """A command of this process committed up to `position`, adding to the event logs of
        `organizations`: read it now, if anyone here waits for those (no thread is woken
        otherwise)."""
        if self.recent.waits_for(organizations):
            self._nudged.set()

    def wake(self) -> None:
        """Something started wanting the follower (a first subscriber, `needed` now true)."""
        self._nudged.set()

    def wanted(self) -> bool:
        """Subscribers here, or (on PostgreSQL, where the follower rings `on_notify` for every
        process's commits) something `needed`."""
        return self.recent.has_subscribers or (self._listens and self.needed())

    def _run(self) -> None:
        follow = self._listen if self._listens else self._poll
        while not self._stop.is_set():
            try:
                if self.wanted():
                    follow()
                else:
                    self._nudged.wait(SAFETY_POLL_SECONDS)
                    self._nudged.clear()
            except Exception as exc:
                log_failure(log, "following the event log failed; retrying", exc)
                self._stop.wait(SAFETY_POLL_SECONDS)

    def _poll(self) -> None:
        while not self._stop.is_set() and self.wanted():
            self.recent.refresh()
            self._nudged.wait(SQLITE_POLL_SECONDS)
            self._nudged.clear()

    def _listen(self) -> None:
        from psycopg.sql import SQL, Identifier  # loaded by the PostgreSQL store already

        with self.recorder.datastore.get_connection() as conn:
            conn.execute(SQL("LISTEN {}").format(Identifier(self.recorder.channel_name)))
            while not self._stop.is_set() and self.wanted():
                self.recent.refresh()
                for ring in self.on_notify:
                    ring()
                for _ in conn.notifies(timeout=SAFETY_POLL_SECONDS, stop_after=1):
                    pass
            # Back to the pool: no more notifications for a connection nobody listens on.
            conn.execute(SQL("UNLISTEN {}").format(Identifier(self.recorder.channel_name)))
