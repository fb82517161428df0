"""The application: the commands that change state, each saved atomically as domain events.

Races are settled by the event store, not by locks: two commands that loaded the same aggregate
version cannot both save, and the loser runs again against the new state. Each attempt decides
at one instant, read from `clock` after loading, which every event it makes carries as its
timestamp. On PostgreSQL the clock is the database's and the save's transaction checks it
(storage/clock.py): a refused command runs again on a fresh reading. That estimate trails the
database by a round trip, so a command never decides before the last instant of what it loaded
(`_instant_after`): a release on one node and an acquire right after on another keep their order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent
from eventsourcing.domain import DomainEvent
from eventsourcing.persistence import IntegrityError, JSONTranscoder, Recording, Transcoding

from titen.domain.clock import Clock, truncate
from titen.domain.errors import Contention, InvalidField, NotFound
from titen.domain.events import published_organizations
from titen.domain.handoff import Handoff, public_id
from titen.domain.ids import LEASE, new_id, new_uuid
from titen.domain.lease import Holding, Lease, ResourceKeys, Term
from titen.storage.group_commit import GroupCommit
from titen.storage.inline import DOMAIN_EVENTS, ReadModelWriteFailed
from titen.storage.outages import ClockDisagrees, is_outage, log_failure

log = logging.getLogger("titen.app")

T = TypeVar("T")
MAX_ATTEMPTS = 32
NODE_LAG = timedelta(seconds=1)
"""The most one process's clock may trail another's last instant on an aggregate and still be
moved up to it: more is not the lag of an estimate (an event an earlier release stamped with
its own wall clock, a test's clock), and is left as it is."""
CLOCK_ATTEMPTS = 3
"""Saves of one command the database's clock may refuse (each followed by a fresh reading of
it) before the command answers an outage."""
KNOWN_LIMIT = 100_000
"""Resources remembered as existing in the store, per process; past it the memory starts again."""
Keep = Callable[[Any], Any] | None
"""Given a command's result, a row to store in its transaction (an idempotent request's answer,
titen.service.answers); None to store nothing."""


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


CommitListener = Callable[[int, frozenset[str]], None]
"""Told of each save once it has committed: its last log position, and the organizations whose
event logs it added to."""


class Titen(Application[UUID]):
    name = "titen"
    snapshotting_intervals = {Lease: 100}  # noqa: RUF012 (the library's class-level config)
    resource_keys: ResourceKeys
    """How this store names resources' Lease aggregates: set from the store's secret once the
    store is open (service/bootstrap.py), before any command runs."""
    clock: Clock
    """What commands decide by: the store's clock (the database's on PostgreSQL), or a test's;
    set once the store is open (service/bootstrap.py), before any command runs."""

    def __init__(self, env: dict[str, str]):
        super().__init__(env)
        self.commits = GroupCommit(self.save)  # how every command saves
        self.on_commit: list[CommitListener] = []
        """Told of each save once it has committed (wakes subscribers, and only theirs)."""
        self.on_read_model_failure: list[Callable[[ReadModelWriteFailed], None]] = []
        """Told of a save that failed because a read model could not apply its events."""
        self._known: set[UUID] = set()
        """Lease keys this process has seen in the store: an acquire of any other resource
        assumes it is new and skips the two reads of loading it (the save's version check
        refuses the assumption if it was wrong, and the command runs again, loading)."""

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        transcoder.register(TermAsDict())

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[UUID]]:
        """The library's save (record, snapshot what fell due, tell the commit listeners),
        telling a domain event from an aggregate by its class: the library asks with
        `isinstance` against runtime Protocols, which inspects every member of the protocol on
        each call (four such checks per acquire)."""
        processing_event: ProcessingEvent[UUID] = ProcessingEvent()
        for obj in objs:
            if isinstance(obj, DomainEvent):
                processing_event.events.append(obj)
            elif obj is not None:
                processing_event.events.extend(obj.collect_events())
                processing_event.aggregates[obj.id] = obj
        processing_event.saved_kwargs.update(kwargs)
        recordings = self._record(processing_event)
        self._take_snapshots(processing_event)
        self._notify(recordings)
        return recordings

    def _record(self, processing_event: ProcessingEvent[UUID]) -> list[Recording[UUID]]:
        """Record the events, handing them to the recorder as the command made them, so the
        read models are written in the same transaction without decoding them again."""
        processing_event.saved_kwargs[DOMAIN_EVENTS] = processing_event.events
        try:
            return super()._record(processing_event)
        except ReadModelWriteFailed as failed:
            for listener in self.on_read_model_failure:
                listener(failed)  # the transaction has rolled back: this can be recorded
            raise

    def _take_snapshots(self, processing_event: ProcessingEvent[UUID]) -> None:
        """Snapshot what fell due, after the command's events have committed.

        A snapshot only shortens replays, and it is written in a transaction of its own after
        the command's: failing to write one (the database went away meanwhile, or another
        process wrote the same one) must not turn a command that committed into an error.
        """
        try:
            super()._take_snapshots(processing_event)
        except IntegrityError:
            pass  # another process snapshotted that version first
        except Exception as exc:
            if not is_outage(exc):
                raise
            log.warning("a snapshot was not written (the command had committed): %s", exc)

    def _notify(self, recordings: list[Recording[UUID]]) -> None:
        """Tell the commit listeners, which only wake readers: the command has committed, so a
        listener that fails (one may read the database, which may be failing right now) is
        logged and must not turn it into a failed command (a 503 for a change that was made)."""
        if recordings:
            position = recordings[-1].notification.id
            organizations = published_organizations(r.domain_event for r in recordings)
            for listener in self.on_commit:
                try:
                    listener(position, organizations)
                except Exception as exc:
                    log_failure(log, "a commit listener failed (the command had committed)", exc)

    def acquire_lease(
        self,
        *,
        organization: str,
        holder: str,
        resource_type: str,
        resource_id: str,
        purpose: str,
        ttl_seconds: int,
        keep: Keep = None,
    ) -> Committed[Holding]:
        key = self.resource_keys.of(organization, resource_type, resource_id)
        assume_new = key not in self._known

        def attempt() -> tuple[Holding, Lease]:
            nonlocal assume_new
            lease: Lease | None = None
            if not assume_new:
                lease = self._find(key)
            assume_new = False  # if this save conflicts, the resource exists: load it next time
            now = self._instant_after(lease)
            if lease is None:
                lease = Lease(key, organization, resource_type, resource_id, timestamp=now)
            holding = lease.acquire(
                lease_id=new_id(LEASE),
                holder=holder,
                purpose=purpose,
                now=now,
                ttl_seconds=ttl_seconds,
            )
            return holding, lease

        committed = self._retrying(attempt, keep)
        self._remember(key)
        return committed

    def _instant_after(self, loaded: Any) -> datetime:
        """The instant to decide at: the clock's, or the last instant of the aggregate it
        decides on (its last event's, `modified_on`) if that is later by up to NODE_LAG.

        That instant was no later than the database's clock when it was saved, so this one is
        not either: it is still the database's time, read by a node whose estimate trailed
        less than this one's."""
        now = self.clock.now()
        last = None if loaded is None else truncate(loaded.modified_on)
        if last is not None and now < last <= now + NODE_LAG:
            return last
        return now

    def _find(self, key: UUID) -> Any:
        """The aggregate, or None if the store has none under `key`."""
        try:
            return self.repository.get(key)
        except AggregateNotFoundError:
            return None

    def _remember(self, key: UUID) -> None:
        if len(self._known) >= KNOWN_LIMIT:
            self._known.clear()
        self._known.add(key)

    def lease_holding(
        self, *, lease_key: UUID, lease_id: str, by: str, as_operator: bool
    ) -> Holding:
        """The current term of a resource if it is `lease_id` and `by` may see it, from the log.

        Read from the event store rather than a projection, so a holder checking right before its
        destructive step is never told about a lease that has already been superseded or replaced.
        """
        lease: Lease = self._get(lease_key)
        return lease.holding(lease_id=lease_id, by=by, as_operator=as_operator)

    def release_lease(
        self, *, lease_key: UUID, lease_id: str, by: str, as_operator: bool
    ) -> Committed[datetime]:
        def attempt() -> tuple[datetime, Lease]:
            lease = self._get(lease_key)
            now = self._instant_after(lease)
            lease.release(lease_id=lease_id, by=by, as_operator=as_operator, now=now)
            return now, lease

        return self._retrying(attempt)

    def create_handoff(
        self,
        *,
        organization: str,
        from_principal: str,
        to_principal: str,
        subject_id: str,
        context_id: str | None,
        checkpoint_id: str | None,
        message: str | None,
        is_principal: Callable[[str], bool],
        keep: Keep = None,
    ) -> Committed[Handoff]:
        """Record a pending handoff to another principal of the organization.

        `is_principal` answers whether a name is a principal of the organization: who holds
        credentials is the edge's knowledge, so it is asked rather than imported.
        """
        if to_principal == from_principal:
            raise InvalidField("to_principal", "to_principal must not be the caller.")
        if not is_principal(to_principal):
            raise InvalidField(
                "to_principal", "to_principal is not a principal of this organization."
            )

        def attempt() -> tuple[Handoff, Handoff]:
            now = self.clock.now()
            handoff = Handoff(
                id=new_uuid(),
                organization=organization,
                from_principal=from_principal,
                to_principal=to_principal,
                subject_id=subject_id,
                context_id=context_id,
                checkpoint_id=checkpoint_id,
                message=message,
                created_at=now,
                timestamp=now,
            )
            return handoff, handoff

        return self._retrying(attempt, keep)

    def resolve_handoff(
        self, *, organization: str, key: UUID, by: str, accept: bool, keep: Keep = None
    ) -> Committed[Handoff]:
        """Accept or reject a pending handoff as its target; a lost race finds it resolved."""

        def attempt() -> tuple[Handoff, Handoff]:
            handoff = self.get_handoff(key, missing=f"No pending handoff {public_id(key)}.")
            now = self._instant_after(handoff)
            handoff.resolve(organization=organization, by=by, accept=accept, now=now)
            return handoff, handoff

        return self._retrying(attempt, keep)

    def get_handoff(self, key: UUID, missing: str | None = None) -> Handoff:
        """A handoff from the event store, in any status (NotFound if the id is no handoff)."""
        message = missing or f"No handoff {public_id(key)}."
        try:
            handoff: object = self.repository.get(key)
        except AggregateNotFoundError:
            raise NotFound(message) from None
        if not isinstance(handoff, Handoff):
            raise NotFound(message)
        return handoff

    def _get(self, key: UUID) -> Any:
        try:
            return self.repository.get(key)
        except AggregateNotFoundError:
            raise NotFound() from None

    def _retrying(self, attempt: Callable[[], tuple[T, Any]], keep: Keep = None) -> Committed[T]:
        """Run a load-decide-save attempt until it saves without a version conflict, storing
        `keep(result)` in the same transaction as its events.

        An IntegrityError is only ever a lost race here: the store never retries a commit
        whose answer was lost (it finds out whether it landed: storage/postgres.py), so a
        command is never run again over its own events. A save whose instants the database's
        clock refused stored nothing either: the attempt runs again, up to CLOCK_ATTEMPTS."""
        refused = 0
        for _ in range(MAX_ATTEMPTS):
            value, aggregate = attempt()
            try:
                recordings = self.commits.save(aggregate, None if keep is None else keep(value))
            except IntegrityError:
                continue
            except ClockDisagrees:
                refused += 1
                if refused == CLOCK_ATTEMPTS:
                    raise
                continue
            return Committed(value, recordings[-1].notification.id)
        raise Contention("too many concurrent changes to one item; retry")
