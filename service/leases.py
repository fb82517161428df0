"""The lease commands as a caller makes them: who may, and reading one's own write at once.

The REST resources and any other edge call one method per command; the organization check on
release and the read-your-writes step (the projections caught up to the command's position
before it answers) live here, once, rather than in every resource.
"""

from __future__ import annotations

from datetime import datetime

from titen.domain.clock import Clock
from titen.domain.errors import LeaseHeld, NotFound
from titen.domain.lease import Holding, has_expired
from titen.projections.lease_directory import LeaseDirectory, LeaseEntry
from titen.projections.lease_index import LeaseIndex
from titen.projections.projector import Projector
from titen.service import metrics
from titen.service.application import Titen
from titen.service.keys import Principal


class LeaseService:
    def __init__(
        self,
        app: Titen,
        index: LeaseIndex,
        directory: LeaseDirectory,
        projector: Projector,
        clock: Clock,
    ):
        self.app = app
        self.index = index
        self.directory = directory
        self.projector = projector
        self.clock = clock

    def acquire(
        self, caller: Principal, *, resource_type: str, resource_id: str, purpose: str, ttl: int
    ) -> Holding:
        """Take the resource for `ttl` seconds, superseding the caller's own unexpired lease."""
        try:
            committed = self.app.acquire_lease(
                organization=caller.organization,
                holder=caller.name,
                resource_type=resource_type,
                resource_id=resource_id,
                purpose=purpose,
                ttl_seconds=ttl,
            )
        except LeaseHeld:
            metrics.LEASE_CONFLICTS.inc()
            raise
        metrics.LEASES_ACQUIRED.inc()
        self.projector.reflect(committed.position)
        return committed.value

    def release(self, caller: Principal, lease_id: str) -> datetime:
        """End the caller's lease (or any of the organization's, as an operator); when it ended.

        A lease of another organization is as missing as one that never was.
        """
        found = self.index.find(lease_id)
        if found is None or found.organization != caller.organization:
            raise NotFound(f"No unreleased lease {lease_id}.")
        committed = self.app.release_lease(
            lease_key=found.lease_key,
            lease_id=lease_id,
            by=caller.name,
            as_operator=caller.is_operator,
        )
        metrics.LEASES_RELEASED.inc()
        self.projector.reflect(committed.position)
        return committed.value

    def get(self, caller: Principal, lease_id: str) -> tuple[Holding, bool]:
        """The caller's current lease (any of the organization's, as an operator) and whether
        it has expired; NotFound once it ended or a later acquire replaced it.

        Read from the event store rather than a projection, so a holder checking right before
        its destructive step is never told about a lease that was already superseded.
        """
        missing = NotFound(f"No unreleased lease {lease_id}.")
        found = self.find(lease_id)
        if found is None or found.organization != caller.organization:
            raise missing
        holding = self.app.lease_holding(
            lease_key=found.lease_key,
            lease_id=lease_id,
            by=caller.name,
            as_operator=caller.is_operator,
        )
        return holding, has_expired(holding.expires_at, self.clock.now())

    def find(self, lease_id: str) -> LeaseEntry | None:
        """Which resource's events hold a lease, catching up once if the directory lacks it.

        A lease begun in another process a moment ago may not have reached this process's
        projections yet; an id that is still unknown after the catch-up never began.
        """
        entry = self.directory.find(lease_id)
        if entry is None:
            self.projector.catch_up()
            entry = self.directory.find(lease_id)
        return entry
