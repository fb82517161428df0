"""The lease commands as a caller makes them: who may, and reading one's own write at once.

The REST resources and any other edge call one method per command; the organization check on
release and the read-your-writes step (the projections caught up to the command's position
before it answers) live here, once, rather than in every resource.
"""

from __future__ import annotations

from datetime import datetime

from titen.domain.errors import NotFound
from titen.domain.lease import Term
from titen.projections.lease_index import LeaseIndex
from titen.projections.projector import Projector
from titen.service.application import Titen
from titen.service.keys import Principal


class LeaseService:
    def __init__(self, app: Titen, index: LeaseIndex, projector: Projector):
        self.app = app
        self.index = index
        self.projector = projector

    def acquire(
        self, caller: Principal, *, resource_type: str, resource_id: str, purpose: str, ttl: int
    ) -> Term:
        """Take the resource for `ttl` seconds, superseding the caller's own unexpired lease."""
        committed = self.app.acquire_lease(
            organization=caller.organization,
            holder=caller.name,
            resource_type=resource_type,
            resource_id=resource_id,
            purpose=purpose,
            ttl_seconds=ttl,
        )
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
        self.projector.reflect(committed.position)
        return committed.value
