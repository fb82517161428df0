"""One thread per server process that applies newly committed events as soon as they commit.

Commands in this process catch the projections up themselves; this follower brings in what
other processes commit (or what one that crashed left unapplied), and so wakes subscribers
waiting on the projector. On PostgreSQL it wakes on the event store's NOTIFY (one LISTEN
connection per process, with a poll as the safety net for a lost notification); SQLite has
no notifications, so it polls often, which is one indexed query.
"""

from __future__ import annotations

import logging
import threading

from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg.sql import SQL, Identifier

from titen.projections.projector import Projector

log = logging.getLogger("titen.follower")
SAFETY_POLL_SECONDS = 1.0
SQLITE_POLL_SECONDS = 0.02


class Follower:
    def __init__(self, projector: Projector):
        self.projector = projector
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="follower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        recorder = self.projector.app.recorder
        listens = isinstance(recorder, PostgresApplicationRecorder)
        wait = self._listen if listens else self._poll
        while not self._stop.is_set():
            try:
                wait()
            except Exception:
                log.exception("following the event log failed; retrying")
                self._stop.wait(SAFETY_POLL_SECONDS)

    def _poll(self) -> None:
        while not self._stop.wait(SQLITE_POLL_SECONDS):
            self.projector.catch_up()

    def _listen(self) -> None:
        recorder = self.projector.app.recorder
        with recorder.datastore.get_connection() as conn:
            conn.execute(SQL("LISTEN {}").format(Identifier(recorder.channel_name)))
            while not self._stop.is_set():
                self.projector.catch_up()
                for _ in conn.notifies(timeout=SAFETY_POLL_SECONDS, stop_after=1):
                    pass
