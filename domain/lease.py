"""The Lease aggregate: one leasable resource of an organization and every term on it.

One aggregate per (organization, resource_type, resource_id), with a deterministic id
(`ResourceKeys`), so two acquires of one resource race on the same aggregate version and the
event store's optimistic concurrency lets exactly one win. A term is recorded as how it began
(Acquired) and how it ended (Released, Superseded or ReplacedAfterExpiry). Fencing tokens count
the terms from 1, so a downstream system can refuse a holder paused past its TTL while someone
else took the resource (docs/leases.md). An event's timestamp (the library's, shown by the audit)
is the instant its command decided at, not the process's wall clock: on PostgreSQL the
database's, checked by the save's transaction (docs/deployment.md#clocks).
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar
from uuid import UUID, uuid5

from eventsourcing.domain import Aggregate, event

from titen.domain.errors import LeaseHeld, NotFound
from titen.domain.limits import MAX_TTL_SECONDS, MIN_TTL_SECONDS

NAMESPACE = UUID("6c1e4f0a-3b9d-5e2a-9f71-0d8c2b4a7e53")
"""The uuid5 namespace of resource ids in stores created before ids were keyed."""


@dataclass(frozen=True)
class ResourceKeys:
    """How one store names the Lease aggregate of a resource.

    Keyed (`secret` given: stores created since ids are keyed): the first 16 bytes of an
    HMAC-SHA256 of the resource's name under a secret only the store holds, so nobody can compute
    the id of another organization's resource and use it as a handle (docs/security.md).
    Unkeyed (`secret` None: stores created earlier): the uuid5 those stores' aggregates already
    have. A store keeps one derivation for its whole life; mixing them would let one resource
    have two aggregates, and so two holders.
    """

    secret: bytes | None

    def of(self, organization: str, resource_type: str, resource_id: str) -> UUID:
        name = json.dumps([organization, resource_type, resource_id])
        if self.secret is None:
            return uuid5(NAMESPACE, name)
        return UUID(bytes=hmac.digest(self.secret, name.encode(), "sha256")[:16])


UNKEYED = ResourceKeys(None)


@dataclass(frozen=True)
class Term:
    """The unreleased lease on a resource (it may have expired: nothing sweeps)."""

    lease_id: str
    holder: str
    purpose: str
    acquired_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class Holding:
    """A current term as its holder is told about it: with its resource and fencing token."""

    lease_id: str
    resource_type: str
    resource_id: str
    holder: str
    purpose: str
    acquired_at: datetime
    expires_at: datetime
    fencing_token: int


def has_expired(expires_at: datetime, now: datetime) -> bool:
    """Expiry is inclusive: at `expires_at` the lease has expired (docs/leases.md)."""
    return now >= expires_at


def terms_begun(version: int) -> int:
    """How many terms had begun on a resource once its Lease reached `version`.

    Registered is version 1, and each term adds its Acquired and then one ending event, so the
    n-th Acquired is version 2n. Derived, not kept in the state: events stored before tokens
    existed get the tokens they would have had, and snapshots keep the shape older releases wrote
    (a snapshot's upcast is not told its version, so a stored counter could not be derived).
    """
    return version // 2


class Lease(Aggregate):
    class Registered(Aggregate.Created):
        """The resource's lease stream began (version 1); the id is ResourceKeys.of these three."""

        organization: str
        resource_type: str
        resource_id: str

    @event(Registered)
    def __init__(
        self,
        id: UUID,  # ResourceKeys.of the three below; the library sets the aggregate id from it
        organization: str,
        resource_type: str,
        resource_id: str,
        timestamp: datetime,  # the instant of the command that registers it (the library's)
    ):
        self.organization = organization
        self.resource_type = resource_type
        self.resource_id = resource_id
        self.term: Term | None = None

    def acquire(
        self, *, lease_id: str, holder: str, purpose: str, now: datetime, ttl_seconds: int
    ) -> Holding:
        """Start a new term, ending the current one if it is the holder's own or has expired."""
        if not MIN_TTL_SECONDS <= ttl_seconds <= MAX_TTL_SECONDS:
            raise ValueError(f"ttl_seconds out of range: {ttl_seconds}")
        current = self.term
        if current is not None:
            if has_expired(current.expires_at, now):
                self._replace_after_expiry(lease_id=current.lease_id, ended_at=now, timestamp=now)
            elif current.holder == holder:
                self._supersede(lease_id=current.lease_id, ended_at=now, timestamp=now)
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
            fencing_token=terms_begun(self.version) + 1,
            timestamp=now,
        )
        return self._holding()

    def holding(self, *, lease_id: str, by: str, as_operator: bool) -> Holding:
        """The current term if it is `lease_id` and `by` may see it (its holder or an operator).

        Anything else — an ended, superseded or replaced lease, or another principal's — is
        NotFound, exactly as for release, so asking tells a stranger nothing.
        """
        self._visible(lease_id=lease_id, by=by, as_operator=as_operator)
        return self._holding()

    def release(self, *, lease_id: str, by: str, as_operator: bool, now: datetime) -> None:
        """End the current term; the holder or an operator may, anyone else finds nothing."""
        current = self._visible(lease_id=lease_id, by=by, as_operator=as_operator)
        self._release(
            lease_id=lease_id,
            released_at=now,
            released_by=by,
            by_operator=current.holder != by,
            timestamp=now,
        )

    def _visible(self, *, lease_id: str, by: str, as_operator: bool) -> Term:
        current = self.term
        if current is None or current.lease_id != lease_id:
            raise NotFound(f"No unreleased lease {lease_id}.")
        if current.holder != by and not as_operator:
            raise NotFound(f"No unreleased lease {lease_id}.")
        return current

    def _holding(self) -> Holding:
        """The current term; it is the newest, so its token is the count of terms begun."""
        term = self.term
        assert term is not None
        return Holding(
            lease_id=term.lease_id,
            resource_type=self.resource_type,
            resource_id=self.resource_id,
            holder=term.holder,
            purpose=term.purpose,
            acquired_at=term.acquired_at,
            expires_at=term.expires_at,
            fencing_token=terms_begun(self.version),
        )

    class Acquired(Aggregate.Event):
        """A term began. Version 2 added `ttl_seconds`, the lifetime the holder asked for.

        Version 1 recorded only the resulting `expires_at`; an audit shows what was asked, so
        version 2 records it, and a stored version 1 event is read with the same value derived
        from its two instants (see docs/events.md). Version 3 added `fencing_token`; an older
        event gets the token its position in the resource's history implies.
        """

        class_version = 3

        fencing_token_published: ClassVar[bool] = True
        """Whether the event log shows `fencing_token`. An event recorded before version 3 was
        published without it, and a published event never changes (subscribers have seen it):
        its upcast sets False on the event, so a rebuild of the event log renders it as it was
        published and `titen projections verify` compares like with like (docs/events.md)."""

        lease_id: str
        organization: str
        resource_type: str
        resource_id: str
        holder: str
        purpose: str
        acquired_at: datetime
        expires_at: datetime
        ttl_seconds: int
        fencing_token: int

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            lifetime = state["expires_at"] - state["acquired_at"]
            state["ttl_seconds"] = int(lifetime.total_seconds())

        @staticmethod
        def upcast_v2_v3(state: dict[str, Any]) -> None:
            state["fencing_token"] = terms_begun(state["originator_version"])
            state["fencing_token_published"] = False  # not a field: nothing stores it

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
        fencing_token: int,
        timestamp: datetime,
    ) -> None:
        self.term = Term(lease_id, holder, purpose, acquired_at, expires_at)

    class Released(Aggregate.Event):
        """The holder (or an operator, `by_operator`) ended the term."""

        lease_id: str
        released_at: datetime
        released_by: str
        by_operator: bool

    @event(Released)
    def _release(
        self,
        lease_id: str,
        released_at: datetime,
        released_by: str,
        by_operator: bool,
        timestamp: datetime,
    ) -> None:
        self.term = None

    class Superseded(Aggregate.Event):
        """The holder acquired again, ending its own current term."""

        lease_id: str
        ended_at: datetime

    @event(Superseded)
    def _supersede(self, lease_id: str, ended_at: datetime, timestamp: datetime) -> None:
        self.term = None

    class ReplacedAfterExpiry(Aggregate.Event):
        """Another acquire found the term expired and ended it."""

        lease_id: str
        ended_at: datetime

    @event(ReplacedAfterExpiry)
    def _replace_after_expiry(self, lease_id: str, ended_at: datetime, timestamp: datetime) -> None:
        self.term = None
