"""POST /v1/leases (acquire) and DELETE /v1/leases/{lease_id} (release)."""

from __future__ import annotations

import falcon

from titen.api.rest.auth import principal_of
from titen.api.rest.body import obj, read_json, text
from titen.api.rest.errors import error
from titen.domain.clock import iso
from titen.domain.lease import MAX_TTL_SECONDS, MIN_TTL_SECONDS
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
            }
        }


class Lease:
    def __init__(self, services: Services):
        self.services = services

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
