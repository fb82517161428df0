"""POST /v1/leases (acquire) and DELETE /v1/leases/{lease_id} (release)."""

from __future__ import annotations

import falcon

from titen.api import schemas
from titen.api.rest.auth import principal_of
from titen.api.rest.body import read_json, validator
from titen.domain.clock import iso
from titen.service.leases import LeaseService

ACQUIRE = validator(schemas.ACQUIRE)


class Leases:
    def __init__(self, leases: LeaseService):
        self.leases = leases

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_json(req, ACQUIRE)
        term = self.leases.acquire(
            principal_of(req),
            resource_type=body["resource_type"],
            resource_id=body["resource_id"],
            purpose=body["purpose"],
            ttl=int(body["ttl_seconds"]),
        )
        resp.status = falcon.HTTP_201
        resp.media = {"data": {"lease_id": term.lease_id, "expires_at": iso(term.expires_at)}}


class Lease:
    def __init__(self, leases: LeaseService):
        self.leases = leases

    def on_delete(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        released_at = self.leases.release(principal_of(req), lease_id)
        resp.media = {"data": {"lease_id": lease_id, "released_at": iso(released_at)}}
