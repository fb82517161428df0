"""How a commit wakes the delivery workers (service/workers.py) without each polling the
database: a condition variable with a version number, rung once per commit."""

from __future__ import annotations

import threading


class Doorbell:
    """Wakes idle workers when events commit: rung by this process's commits and, on
    PostgreSQL, by the follower on every other process's (its NOTIFY). Workers also look again
    every IDLE_POLL_SECONDS (service/workers.py), for retries that came due and for other
    SQLite processes' commits.

    A ring wakes one idle worker, and a worker that claims a consumer rings again for the next:
    a commit that makes k consumers due wakes k + 1 workers, each claiming at once, instead of
    every worker racing for the same few rows.
    """

    def __init__(self) -> None:
        self._rung = threading.Condition()
        self._version = 0

    def ring(self, *_: object) -> None:
        with self._rung:
            self._version += 1
            self._rung.notify()

    def ring_all(self) -> None:
        """Wake every idle worker at once: they are stopping, or something to deliver appeared
        while they slept (service/workers.py); each would otherwise sleep out its poll."""
        with self._rung:
            self._version += 1
            self._rung.notify_all()

    def version(self) -> int:
        return self._version

    def wait_past(self, version: int, timeout: float) -> bool:
        with self._rung:
            return self._rung.wait_for(lambda: self._version != version, timeout)
