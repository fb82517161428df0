"""The one source of time, injectable so tests can cross an expiry without sleeping."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """Wall-clock time in UTC, truncated to the millisecond the API reports."""

    def now(self) -> datetime:
        return truncate(datetime.now(UTC))


def truncate(instant: datetime) -> datetime:
    """Drop sub-millisecond digits so stored and reported instants agree exactly."""
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def iso(instant: datetime) -> str:
    """The wire form of an instant: UTC, milliseconds, `Z` (2026-07-30T10:58:13.829Z)."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{instant.microsecond // 1000:03d}Z"
    )


def parse_iso(text: str) -> datetime:
    """Read an instant written by `iso` (or any ISO 8601 form with an offset)."""
    instant = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if instant.tzinfo is None:
        raise ValueError("an instant needs a UTC offset")
    return instant.astimezone(UTC)
