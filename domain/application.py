"""The application: the commands that change state, each saved atomically as domain events.

Races are settled by the event store, not by locks: two commands that loaded the same
aggregate version cannot both save, and the loser runs again against the new state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError, Transcoder, Transcoding

from domain.clock import Clock
from domain.errors import Contention, NotFound
from domain.ids import LEASE, new_id
from domain.lease import Lease, Term

T = TypeVar("T")
MAX_ATTEMPTS = 32


@dataclass(frozen=True)
class Committed(Generic[T]):
    """A command's result and its position in the event log (for read-your-writes)."""

    value: T
    position: int


class TermAsDict(Transcoding):
    """Lets snapshots of a Lease carry its current Term."""

    type = Term
    name = "lease_term"

    def encode(self, obj: Term) -> dict[str, Any]:
        return asdict(obj)

    def decode(self, data: dict[str, Any]) -> Term:
        return Term(**data)


class Titen(Application[UUID]):
    name = "titen"
    snapshotting_intervals = {Lease: 100}  # noqa: RUF012 (the library's class-level config)

    def __init__(self, env: dict[str, str], clock: Clock):
        super().__init__(env)
        self.clock = clock

    def register_transcodings(self, transcoder: Transcoder) -> None:
        super().register_transcodings(transcoder)
        transcoder.register(TermAsDict())

    def acquire_lease(
        self,
        *,
        organization: str,
        holder: str,
        resource_type: str,
        resource_id: str,
        purpose: str,
        ttl_seconds: int,
    ) -> Committed[Term]:
        key = Lease.create_id(organization, resource_type, resource_id)

        def attempt() -> tuple[Term, Lease]:
            try:
                lease: Lease = self.repository.get(key)
            except AggregateNotFoundError:
                lease = Lease(organization, resource_type, resource_id)
            term = lease.acquire(
                lease_id=new_id(LEASE),
                holder=holder,
                purpose=purpose,
                now=self.clock.now(),
                ttl_seconds=ttl_seconds,
            )
            return term, lease

        return self._retrying(attempt)

    def release_lease(
        self, *, lease_key: UUID, lease_id: str, by: str, as_operator: bool
    ) -> Committed[datetime]:
        def attempt() -> tuple[datetime, Lease]:
            lease = self._get(lease_key)
            now = self.clock.now()
            lease.release(lease_id=lease_id, by=by, as_operator=as_operator, now=now)
            return now, lease

        return self._retrying(attempt)

    def _get(self, key: UUID) -> Any:
        try:
            return self.repository.get(key)
        except AggregateNotFoundError:
            raise NotFound() from None

    def _retrying(self, attempt: Callable[[], tuple[T, Any]]) -> Committed[T]:
        """Run a load-decide-save attempt until it saves without a version conflict."""
        for _ in range(MAX_ATTEMPTS):
            value, aggregate = attempt()
            try:
                recordings = self.save(aggregate)
            except IntegrityError:
                continue
            return Committed(value, recordings[-1].notification.id)
        raise Contention("too many concurrent changes to one item; retry")
