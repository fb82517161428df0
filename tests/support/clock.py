"""A clock for the in-process tests."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class FakeClock:
    """A clock that moves only when told, so tests cross an expiry without sleeping."""

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime(2026, 7, 30, 10, 48, 13, 829000, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)
