"""A read model that failed on an event: recorded where every process sees it, until repaired.

The read models are written in each command's own transaction, so a read model that cannot apply
an event fails that command and nothing is stored. That must not pass silently: the failure is
logged with the event's log position and type, counted, and kept in the `projection_failures`
table. It is written after the failed transaction rolled back (so it is not rolled back with it)
and read by every server's /readyz, which answers 503 while any is recorded, and by the metrics.
A rebuild of the read model (`titen projections rebuild NAME`) removes it, and so does a
verification that finds the read model equal to the log (the failure did not come from its rows).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from titen.domain.clock import Clock, iso
from titen.domain.events import event_type
from titen.projections.store import ViewStore

log = logging.getLogger("titen.projections")

FAILURES = Counter(
    "titen_projection_failures",
    "Times a read model failed to apply an event (each failed the command that made it).",
    ["projection"],
)


class ProjectionFailed(Exception):
    """One read model could not apply one event; the transaction around it rolls back."""

    def __init__(self, projection: str, position: int, event: object, cause: BaseException):
        self.projection = projection
        self.position = position
        self.event_type = event_type(event)
        self.error = f"{type(cause).__name__}: {cause}"
        super().__init__(
            f"read model {projection} failed on log position {position} ({self.event_type}):"
            f" {self.error}; `titen projections rebuild {projection}` rebuilds it from the log"
        )


@dataclass(frozen=True)
class Failure:
    """A recorded failure, as /readyz shows it."""

    projection: str
    position: int
    event_type: str
    error: str
    failed_at: str


class Failures:
    def __init__(self, store: ViewStore, clock: Clock, projections: list[str]):
        self.store = store
        self.clock = clock
        for name in projections:
            FAILURES.labels(name)  # every projection's series exists from the start, at 0

    def schema(self) -> list[str]:
        """Its table, created by the projector with the read models' (one transaction)."""
        return [
            "CREATE TABLE IF NOT EXISTS {projection_failures} ("
            " projection TEXT PRIMARY KEY, position BIGINT NOT NULL,"
            " event_type TEXT NOT NULL, error TEXT NOT NULL, failed_at TEXT NOT NULL)"
        ]

    def record(self, failed: ProjectionFailed) -> None:
        """Log, count and keep a failure (the latest per read model), outside any transaction."""
        log.error(
            "%s",
            failed,
            exc_info=_exc_info(failed.__cause__),
            extra={
                "fields": {
                    "projection": failed.projection,
                    "position": failed.position,
                    "event_type": failed.event_type,
                }
            },
        )
        FAILURES.labels(failed.projection).inc()
        row = [failed.projection, failed.position, failed.event_type, failed.error]
        with self.store.writing() as writer:
            writer.execute(
                "INSERT INTO {projection_failures} VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (projection) DO UPDATE SET position = excluded.position,"
                " event_type = excluded.event_type, error = excluded.error,"
                " failed_at = excluded.failed_at",
                [*row, iso(self.clock.now())],
            )

    def current(self) -> list[Failure]:
        """Every read model's recorded failure, by name."""
        rows = self.store.query("SELECT * FROM {projection_failures} ORDER BY projection")
        return [Failure(**row) for row in rows]

    def clear(self, projection: str) -> None:
        """The read model was repaired (rebuilt, or found equal to the log).

        Read first: a repair with nothing to clear takes no write lock (SQLite has one for the
        whole database, which a busy server holds most of the time).
        """
        found = self.store.query(
            "SELECT projection FROM {projection_failures} WHERE projection = %s", [projection]
        )
        if not found:
            return
        with self.store.writing() as writer:
            writer.execute("DELETE FROM {projection_failures} WHERE projection = %s", [projection])


def _exc_info(cause: BaseException | None) -> Any:
    """What `logging` needs to print the traceback of the read model's own error."""
    return None if cause is None else (type(cause), cause, cause.__traceback__)
