"""The public name of every domain event, and which of them are published to the event log.

One source for the names the REST API, the event log, the audit and the CLI show: every other
module refers to these constants instead of spelling the strings.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from titen.domain.handoff import Handoff
from titen.domain.lease import Lease
from titen.domain.published import (
    HANDOFF_ACCEPTED,
    HANDOFF_CREATED,
    HANDOFF_REJECTED,
    LEASE_ACQUIRED,
    PUBLISHED,
)

NAMES: dict[type, str] = {
    Lease.Registered: "lease.registered",
    Lease.Acquired: LEASE_ACQUIRED,
    Lease.Released: "lease.released",
    Lease.Superseded: "lease.superseded",
    Lease.ReplacedAfterExpiry: "lease.replaced_after_expiry",
    Handoff.Created: HANDOFF_CREATED,
    Handoff.Accepted: HANDOFF_ACCEPTED,
    Handoff.Rejected: HANDOFF_REJECTED,
}
__all__ = [
    "HANDOFF_ACCEPTED",
    "HANDOFF_CREATED",
    "HANDOFF_REJECTED",
    "LEASE_ACQUIRED",
    "NAMES",
    "PUBLISHED",
    "event_type",
    "published_organizations",
]


def event_type(event: Any) -> str:
    """The public name of an event ("lease.acquired"); an unknown class goes by its own name."""
    return NAMES.get(type(event), type(event).__qualname__)


def published_organizations(events: Iterable[Any]) -> frozenset[str]:
    """The organizations whose event logs these events add rows to: only a published event
    has one (and each names its organization)."""
    return frozenset(event.organization for event in events if event_type(event) in PUBLISHED)
