"""Whether this server can do its work, read from the database each time it is asked.

The positions come from the tracking table, not from this process's memory, so every server
process (and every worker of one) tells the same truth about the shared read models, and a
rebuild run from the command line shows at once.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as NoAnswer
from dataclasses import dataclass, field

from titen.projections.failures import Failure
from titen.projections.projector import Projector
from titen.projections.store import ViewStore
from titen.service.application import Titen

log = logging.getLogger("titen.readiness")
ANSWER_SECONDS = 1.5
"""How long a readiness check waits for the database: /readyz answers within 2 s always."""


@dataclass(frozen=True)
class ProjectionState:
    position: int
    """The last log position the read model has applied."""
    lag: int
    """Log positions committed but not yet applied (an upper bound on events: PostgreSQL's
    positions may have gaps)."""


@dataclass(frozen=True)
class Report:
    database: str
    """"ok", or why the database did not answer."""
    log_position: int | None = None
    projections: dict[str, ProjectionState] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    """Read models that failed on an event and were not repaired since."""
    writes_blocked: str | None = None
    """Why no write can commit although the database answers (a synchronous standby missing)."""

    @property
    def ready(self) -> bool:
        return self.database == "ok" and not self.failures and self.writes_blocked is None

    def reasons(self) -> list[str]:
        """What is wrong, in words anyone may read: no positions, counts or error texts (a
        position polled without a key would count every organization's events)."""
        if self.database != "ok":
            return ["the database does not answer"]
        return [
            f"read model {f.projection} failed on an event; repair it with"
            f" `titen projections rebuild {f.projection}`"
            for f in self.failures
        ] + self._blocked()

    def problems(self) -> list[str]:
        """What is wrong, in words, for the operator reading /readyz."""
        if self.database != "ok":
            return [f"database: {self.database}"]
        return [
            f"{f.projection}: failed on log position {f.position} ({f.event_type}): {f.error};"
            f" repair with `titen projections rebuild {f.projection}`"
            for f in self.failures
        ] + self._blocked()

    def _blocked(self) -> list[str]:
        return [self.writes_blocked] if self.writes_blocked is not None else []


class Readiness:
    """Reads the database in one thread of its own, at most one read at a time: callers that
    ask while a read is under way share it, so a database that does not answer holds one
    thread, not one per probe, and every caller has its answer within ANSWER_SECONDS."""

    def __init__(self, app: Titen, store: ViewStore, projector: Projector):
        self.app = app
        self.store = store
        self.projector = projector
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="readiness")
        self._reading: Future[Report] | None = None
        self._lock = threading.Lock()

    def start(self) -> Future[Report]:
        """The read under way, or a new one: `check` then answers from it."""
        with self._lock:
            if self._reading is None or self._reading.done():
                self._reading = self._reader.submit(self._read)
            return self._reading

    def check(self, reading: Future[Report] | None = None, began: float | None = None) -> Report:
        """The report of `reading` (from `start`; by default the read under way, or a new one)
        within ANSWER_SECONDS of `began` (time.monotonic(); by default now)."""
        reading = reading or self.start()
        waited = 0.0 if began is None else time.monotonic() - began
        try:
            return reading.result(timeout=max(0.0, ANSWER_SECONDS - waited))
        except NoAnswer:
            log.warning("readiness: the database did not answer within %g s", ANSWER_SECONDS)
            return Report(database=f"unreachable (no answer within {ANSWER_SECONDS:g} s)")

    def _read(self) -> Report:
        try:
            log_position = self.app.recorder.max_notification_id() or 0
            rows = self.store.query(
                f"SELECT application_name, notification_id FROM {self.store.tracking_table}"
            )
            failures = self.projector.failures.current()
            blocked = self.store.writes_blocked()
        except Exception as exc:
            log.warning("readiness: the database did not answer: %s", exc)
            return Report(database=f"unreachable ({type(exc).__name__})")
        tracked = {row["application_name"]: int(row["notification_id"]) for row in rows}
        states = {}
        for name in self.projector.projections:
            position = tracked.get(name, 0)
            states[name] = ProjectionState(position, max(0, log_position - position))
        return Report("ok", log_position, states, failures, blocked)
