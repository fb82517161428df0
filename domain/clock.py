"""The one source of time, injectable so tests can cross an expiry without sleeping."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Protocol

# RFC 3339's date-time (what OpenAPI's `format: date-time` means): an offset is required.
RFC_3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


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
    utc = instant.astimezone(UTC)  # by hand: strftime is slower, and its %Y unpadded below 1000
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:"
        f"{utc.second:02d}.{utc.microsecond // 1000:03d}Z"
    )


def parse_iso(text: str) -> datetime:
    """Read an RFC 3339 instant (as `iso` writes them); ValueError for anything else, including
    an instant whose UTC form falls outside years 1-9999."""
    if not RFC_3339.fullmatch(text):
        raise ValueError("an instant is RFC 3339, with a UTC offset")
    try:
        return datetime.fromisoformat(text.upper().replace("Z", "+00:00")).astimezone(UTC)
    except OverflowError:
        raise ValueError("the instant is out of range") from None
