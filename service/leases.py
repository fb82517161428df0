"""The lease commands as a caller makes them: who may, once, rather than in every resource.

The REST resources and any other edge call one method per command. A command's read-model rows
commit with its events, so its caller (in any process) reads its own write as soon as it answers.
"""

from __future__ import annotations

from datetime import datetime

from titen.domain.clock import Clock, parse_iso
from titen.domain.errors import LeaseHeld, NotFound
from titen.domain.lease import Holding, has_expired
from titen.projections.lease_directory import LeaseDirectory
from titen.projections.lease_index import LeaseIndex, ListedLease
from titen.service import metrics
from titen.service.application import Keep, Titen
from titen.service.keys import Principal


class LeaseService:
    def __init__(
        self,
        app: Titen,
        index: LeaseIndex,
        directory: LeaseDirectory,
        clock: Clock,
    ):
        self.app = app
        self.index = index
        self.directory = directory
        self.clock = clock

    def acquire(
        self,
        caller: Principal,
        *,
        resource_type: str,
        resource_id: str,
        purpose: str,
        ttl: int,
        keep: Keep = None,
    ) -> Holding:
        """Take the resource for `ttl` seconds, superseding the caller's own unexpired lease;
        `keep(holding)` is stored with the events (an idempotent request's answer)."""
        try:
            committed = self.app.acquire_lease(
                organization=caller.organization,
                holder=caller.name,
                resource_type=resource_type,
                resource_id=resource_id,
                purpose=purpose,
                ttl_seconds=ttl,
                keep=keep,
            )
        except LeaseHeld:
            metrics.LEASE_CONFLICTS.inc()
            raise
        metrics.LEASES_ACQUIRED.inc()
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
        return committed.value

    def get(self, caller: Principal, lease_id: str) -> tuple[Holding, bool]:
        """The caller's current lease (any of the organization's, as an operator) and whether
        it has expired; NotFound once it ended or a later acquire replaced it.

        Read from the event store rather than a projection, so a holder checking right before
        its destructive step is never told about a lease that was already superseded.
        """
        missing = NotFound(f"No unreleased lease {lease_id}.")
        found = self.directory.find(lease_id)
        if found is None or found.organization != caller.organization:
            raise missing
        holding = self.app.lease_holding(
            lease_key=found.lease_key,
            lease_id=lease_id,
            by=caller.name,
            as_operator=caller.is_operator,
        )
        return holding, has_expired(holding.expires_at, self.clock.now())

    def held(
        self,
        caller: Principal,
        *,
        before: int | None,
        limit: int,
        holder: str | None,
        resource_type: str | None,
    ) -> list[tuple[ListedLease, bool]]:
        """The organization's unreleased leases, newest first, each with whether it has expired;
        an agent's own only (a `holder` filter naming another principal finds none)."""
        if not caller.reads_organization:
            if holder not in (None, caller.name):
                return []
            holder = caller.name
        rows = self.index.page(
            caller.organization,
            before=before,
            limit=limit,
            holder=holder,
            resource_type=resource_type,
        )
        now = self.clock.now()
        return [(row, has_expired(parse_iso(row.fields["expires_at"]), now)) for row in rows]
