"""POST /v1/leases (acquire), GET /v1/leases/{lease_id} (check) and DELETE (release).

The GET is what a holder asks right before its destructive step: it answers only while the
lease is the resource's current term, read from the event log, with its fencing token.
"""

from __future__ import annotations

from typing import Any

import falcon

from titen.api.rest.auth import principal_of
from titen.api.rest.body import obj, read_json, text
from titen.api.rest.errors import error
from titen.domain.clock import iso
from titen.domain.lease import MAX_TTL_SECONDS, MIN_TTL_SECONDS, Holding, has_expired
from titen.service.bootstrap import Services

ACQUIRE = obj(
    {
        "resource_type": text(200),
        "resource_id": text(200),
        "purpose": text(1000, multiline=True),
        "ttl_seconds": {"type": "integer", "minimum": MIN_TTL_SECONDS, "maximum": MAX_TTL_SECONDS},
    },
    required=["resource_type", "resource_id", "purpose", "ttl_seconds"],
)


class Leases:
    def __init__(self, services: Services):
        self.services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_json(req, ACQUIRE)
        caller = principal_of(req)
        committed = self.services.app.acquire_lease(
            organization=caller.organization,
            holder=caller.name,
            resource_type=body["resource_type"],
            resource_id=body["resource_id"],
            purpose=body["purpose"],
            ttl_seconds=int(body["ttl_seconds"]),
        )
        self.services.projector.reflect(committed.position)
        resp.status = falcon.HTTP_201
        resp.media = {
            "data": {
                "lease_id": committed.value.lease_id,
                "expires_at": iso(committed.value.expires_at),
                "fencing_token": committed.value.fencing_token,
            }
        }


class Lease:
    def __init__(self, services: Services):
        self.services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        caller = principal_of(req)
        found = self.services.find_lease(lease_id)
        if found is None or found.organization != caller.organization:
            raise error(404, f"No unreleased lease {lease_id}.")
        holding = self.services.app.lease_holding(
            lease_key=found.lease_key,
            lease_id=lease_id,
            by=caller.name,
            as_operator=caller.is_operator,
        )
        expired = has_expired(holding.expires_at, self.services.clock.now())
        resp.media = {"data": holding_view(holding, expired=expired)}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        caller = principal_of(req)
        found = self.services.lease_index.find(lease_id)
        if found is None or found.organization != caller.organization:
            raise error(404, f"No unreleased lease {lease_id}.")
        committed = self.services.app.release_lease(
            lease_key=found.lease_key,
            lease_id=lease_id,
            by=caller.name,
            as_operator=caller.is_operator,
        )
        self.services.projector.reflect(committed.position)
        resp.media = {"data": {"lease_id": lease_id, "released_at": iso(committed.value)}}


def holding_view(holding: Holding, *, expired: bool) -> dict[str, Any]:
    """A current lease on the wire; `expired` since nothing sweeps an expired, unreplaced one."""
    return {
        "lease_id": holding.lease_id,
        "resource_type": holding.resource_type,
        "resource_id": holding.resource_id,
        "holder": holding.holder,
        "purpose": holding.purpose,
        "acquired_at": iso(holding.acquired_at),
        "expires_at": iso(holding.expires_at),
        "fencing_token": holding.fencing_token,
        "expired": expired,
    }
