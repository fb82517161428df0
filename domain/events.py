"""The public name of every domain event, and which of them are published to the event log.

One source for the names the REST API, the event log, the audit and the CLI show: every other
module refers to these constants instead of spelling the strings.
"""

from __future__ import annotations

from typing import Any

from titen.domain.handoff import Handoff
from titen.domain.lease import Lease

LEASE_ACQUIRED = "lease.acquired"
HANDOFF_CREATED = "handoff.created"
HANDOFF_ACCEPTED = "handoff.accepted"
HANDOFF_REJECTED = "handoff.rejected"

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
# Published to subscribers; a lease's ending is recorded in its history only (spec).
PUBLISHED = (LEASE_ACQUIRED, HANDOFF_CREATED, HANDOFF_ACCEPTED, HANDOFF_REJECTED)


def event_type(event: Any) -> str:
    """The public name of an event ("lease.acquired"); an unknown class goes by its own name."""
    return NAMES.get(type(event), type(event).__qualname__)
