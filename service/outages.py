"""Whether a failure is the database's "not now" (retry) rather than a defect, as the edges
answer it (re-exported from storage/outages.py, which the edges do not import)."""

from __future__ import annotations

from titen.storage.outages import (
    ClockDisagrees,
    OutcomeUnknown,
    is_outage,
    log_failure,
)

__all__ = [
    "ClockDisagrees",
    "OutcomeUnknown",
    "is_outage",
    "log_failure",
]
