"""One thread per server process that learns of new commits and wakes subscribers.

The read models are written with each command (projections/projector.py), so nothing is left to
apply: the follower only hands new rows of the event log to this process's streams and
long-polls (projections/recent_events.py), one read per commit for all of them. On PostgreSQL it
wakes on the event store's NOTIFY, which every process's commits send (one LISTEN connection per
process, with a poll as the safety net for a lost notification); SQLite has no notifications, so
it is nudged by this process's commits and polls often for other processes', which is one
indexed query, and only while someone subscribes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg.sql import SQL, Identifier

from titen.projections.recent_events import RecentEvents

log = logging.getLogger("titen.follower")
SAFETY_POLL_SECONDS = 1.0
SQLITE_POLL_SECONDS = 0.02


class Follower:
    def __init__(self, recorder: Any, recent: RecentEvents):
        self.recorder = recorder
        self.recent = recent
        self._stop = threading.Event()
        self._nudged = threading.Event()
        self._thread = threading.Thread(target=self._run, name="follower", daemon=True)
        self.on_notify: list[Callable[[], None]] = []
        """Called on every PostgreSQL notification of a commit (any process's), and on each
        safety poll (the webhook workers' doorbell)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._nudged.set()
        self._thread.join(timeout=5)

    def nudge(self, position: int) -> None:
        """A command of this process committed up to `position`: read it now."""
        self._nudged.set()

    def _run(self) -> None:
        listens = isinstance(self.recorder, PostgresApplicationRecorder)
        wait = self._listen if listens else self._poll
        while not self._stop.is_set():
            try:
                wait()
            except Exception:
                log.exception("following the event log failed; retrying")
                self._stop.wait(SAFETY_POLL_SECONDS)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.recent.refresh()
            self._nudged.wait(SQLITE_POLL_SECONDS)
            self._nudged.clear()

    def _listen(self) -> None:
        with self.recorder.datastore.get_connection() as conn:
            conn.execute(SQL("LISTEN {}").format(Identifier(self.recorder.channel_name)))
            while not self._stop.is_set():
                self.recent.refresh()
                for ring in self.on_notify:
                    ring()
                for _ in conn.notifies(timeout=SAFETY_POLL_SECONDS, stop_after=1):
                    pass
