"""The Lease aggregate: one leasable resource of an organization and every term on it.

One aggregate per (organization, resource_type, resource_id), with a deterministic id, so two
acquires of the same resource race on the same aggregate version and the event store's
optimistic concurrency lets exactly one of them win. Each term is recorded as events: how it
began (Acquired) and how it ended (Released, Superseded or ReplacedAfterExpiry).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid5

from eventsourcing.domain import Aggregate, event

from titen.domain.errors import LeaseHeld, NotFound
from titen.domain.limits import MAX_TTL_SECONDS, MIN_TTL_SECONDS

NAMESPACE = UUID("6c1e4f0a-3b9d-5e2a-9f71-0d8c2b4a7e53")


@dataclass(frozen=True)
class Term:
    """The unreleased lease on a resource (it may have expired: nothing sweeps)."""

    lease_id: str
    holder: str
    purpose: str
    acquired_at: datetime
    expires_at: datetime


class Lease(Aggregate):
    @staticmethod
    def create_id(organization: str, resource_type: str, resource_id: str) -> UUID:
        return uuid5(NAMESPACE, json.dumps([organization, resource_type, resource_id]))

    @event("Registered")
    def __init__(self, organization: str, resource_type: str, resource_id: str):
        self.organization = organization
        self.resource_type = resource_type
        self.resource_id = resource_id
        self.term: Term | None = None

    def acquire(
        self, *, lease_id: str, holder: str, purpose: str, now: datetime, ttl_seconds: int
    ) -> Term:
        """Start a new term, ending the current one if it is the holder's own or has expired."""
        if not MIN_TTL_SECONDS <= ttl_seconds <= MAX_TTL_SECONDS:
            raise ValueError(f"ttl_seconds out of range: {ttl_seconds}")
        current = self.term
        if current is not None:
            if now >= current.expires_at:
                self._replace_after_expiry(lease_id=current.lease_id, ended_at=now)
            elif current.holder == holder:
                self._supersede(lease_id=current.lease_id, ended_at=now)
            else:
                raise LeaseHeld(current.expires_at)
        self._acquire(
            lease_id=lease_id,
            organization=self.organization,
            resource_type=self.resource_type,
            resource_id=self.resource_id,
            holder=holder,
            purpose=purpose,
            acquired_at=now,
            expires_at=now + timedelta(seconds=ttl_seconds),
            ttl_seconds=ttl_seconds,
        )
        assert self.term is not None
        return self.term

    def release(self, *, lease_id: str, by: str, as_operator: bool, now: datetime) -> None:
        """End the current term; the holder or an operator may, anyone else finds nothing."""
        current = self.term
        if current is None or current.lease_id != lease_id:
            raise NotFound(f"No unreleased lease {lease_id}.")
        if current.holder != by and not as_operator:
            raise NotFound(f"No unreleased lease {lease_id}.")
        self._release(
            lease_id=lease_id,
            released_at=now,
            released_by=by,
            by_operator=current.holder != by,
        )

    class Acquired(Aggregate.Event):
        """A term began. Version 2 added `ttl_seconds`, the lifetime the holder asked for.

        Version 1 recorded only the resulting `expires_at`; an audit shows what was asked, so
        version 2 records it, and a stored version 1 event is read with the same value derived
        from its two instants (see docs/events.md).
        """

        class_version = 2

        lease_id: str
        organization: str
        resource_type: str
        resource_id: str
        holder: str
        purpose: str
        acquired_at: datetime
        expires_at: datetime
        ttl_seconds: int

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            lifetime = state["expires_at"] - state["acquired_at"]
            state["ttl_seconds"] = int(lifetime.total_seconds())

    @event(Acquired)
    def _acquire(
        self,
        lease_id: str,
        organization: str,
        resource_type: str,
        resource_id: str,
        holder: str,
        purpose: str,
        acquired_at: datetime,
        expires_at: datetime,
        ttl_seconds: int,
    ) -> None:
        self.term = Term(lease_id, holder, purpose, acquired_at, expires_at)

    @event("Released")
    def _release(
        self, lease_id: str, released_at: datetime, released_by: str, by_operator: bool
    ) -> None:
        self.term = None

    @event("Superseded")
    def _supersede(self, lease_id: str, ended_at: datetime) -> None:
        self.term = None

    @event("ReplacedAfterExpiry")
    def _replace_after_expiry(self, lease_id: str, ended_at: datetime) -> None:
        self.term = None
