"""The values the client returns: the service's JSON answers as typed, immutable records.

Instants become timezone-aware `datetime`s; ids and statuses stay the strings the service sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Lease:
    lease_id: str
    expires_at: datetime
    fencing_token: int
    """1 for the resource's first acquire, one more for each later one: hand it to the system
    the work writes to, so it can refuse a holder whose lease was since taken (docs/leases.md)."""


@dataclass(frozen=True)
class CurrentLease:
    """A lease still held (`get_lease`): the check to make right before the destructive step."""

    lease_id: str
    resource_type: str
    resource_id: str
    holder: str
    purpose: str
    acquired_at: datetime
    expires_at: datetime
    fencing_token: int
    expired: bool
    """Past its expiry but not yet replaced: anyone may now acquire the resource."""


@dataclass(frozen=True)
class HandoffCreated:
    handoff_id: str
    status: str


@dataclass(frozen=True)
class Handoff:
    """A handoff as the service shows it; inbox items carry no `resolved_at` (still pending)."""

    handoff_id: str
    from_principal: str
    to_principal: str
    subject_id: str
    context_id: str | None
    checkpoint_id: str | None
    message: str | None
    status: str
    created_at: datetime
    resolved_at: datetime | None = None


@dataclass(frozen=True)
class InboxPage:
    handoffs: list[Handoff]
    next_cursor: str | None
    """Pass it back as `cursor` for the next page; None at the end of the inbox."""


@dataclass(frozen=True)
class LeasePage:
    leases: list[CurrentLease]
    """Newest first."""
    next_cursor: str | None
    """Pass it back as `cursor` for the next page; None after the last."""


@dataclass(frozen=True)
class EventPage:
    events: list[dict[str, Any]]
    """CloudEvents 1.0 objects, each with the `cursor` it was read at."""
    next_cursor: str
    """Where to resume; never None."""


def instant(text: str) -> datetime:
    """The service's instants are UTC ISO 8601 with a `Z`, which Python 3.11 reads directly."""
    return datetime.fromisoformat(text)


def current_lease_from(data: dict[str, Any]) -> CurrentLease:
    return CurrentLease(
        lease_id=data["lease_id"],
        resource_type=data["resource_type"],
        resource_id=data["resource_id"],
        holder=data["holder"],
        purpose=data["purpose"],
        acquired_at=instant(data["acquired_at"]),
        expires_at=instant(data["expires_at"]),
        fencing_token=data["fencing_token"],
        expired=data["expired"],
    )


def handoff_from(data: dict[str, Any]) -> Handoff:
    """A handoff from its JSON, inbox item (no `resolved_at`) or full record alike."""
    resolved_at = data.get("resolved_at")
    return Handoff(
        handoff_id=data["handoff_id"],
        from_principal=data["from_principal"],
        to_principal=data["to_principal"],
        subject_id=data["subject_id"],
        context_id=data["context_id"],
        checkpoint_id=data["checkpoint_id"],
        message=data["message"],
        status=data["status"],
        created_at=instant(data["created_at"]),
        resolved_at=None if resolved_at is None else instant(resolved_at),
    )
