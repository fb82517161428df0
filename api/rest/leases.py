"""POST /v1/leases (acquire), GET /v1/leases (held leases), GET and DELETE /v1/leases/{lease_id}:
the one lease while it is its resource's current term, as a holder asks before a destructive
step (`expired` too, for nothing sweeps a lease nobody replaced)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import falcon

from titen.api import schemas
from titen.api.rest.auth import principal_of
from titen.api.rest.contract import (
    BOOLEAN,
    INSTANT,
    INTEGER,
    STRING,
    Link,
    answers,
    delete,
    fields_of,
    get,
    listing,
    obj,
    post,
)
from titen.api.rest.errors import OUTCOME_UNKNOWN
from titen.api.rest.idempotency import Idempotency
from titen.api.rest.paging import PAGE_QUERY, read_page
from titen.api.validation import validator
from titen.domain.clock import iso
from titen.domain.lease import Holding
from titen.domain.limits import NAME_LENGTH
from titen.service.leases import LeaseService

ACQUIRE = validator(schemas.ACQUIRE)
FILTERS = {"resource_type": schemas.text(NAME_LENGTH), "holder": schemas.text(NAME_LENGTH)}
LEASE_ID = "$response.body#/data/lease_id"
HOLDING = obj({**fields_of(Holding), "expired": BOOLEAN})


@dataclass
class Leases:
    contract = post(
        "acquireLease",
        "Acquire (or, as its holder, renew under a new id) the lease on a resource.",
        status=201,
        body=schemas.ACQUIRE,
        answer=answers(obj({"lease_id": STRING, "expires_at": INSTANT, "fencing_token": INTEGER})),
        errors=("CONFLICT",),
        idempotent=True,
        links={
            "GetLease": Link("getLease", {"lease_id": LEASE_ID}),
            "ReleaseLease": Link("releaseLease", {"lease_id": LEASE_ID}),
        },
    ) | get(
        "listLeases",
        "The organization's unreleased leases, newest first, paged (an agent's own only).",
        query={**PAGE_QUERY, **FILTERS},
        answer=listing("leases", HOLDING),
        description="Dispatchers and operators see every held lease of the organization; "
        "an agent sees the leases it holds (a `holder` filter naming another finds none). "
        "An expired lease nobody replaced is listed, with `expired` true, until released "
        "or replaced.",
    )

    leases: LeaseService
    idempotency: Idempotency

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.idempotency.post(
            req,
            resp,
            ACQUIRE,
            201,
            lambda caller, keep, ttl_seconds, **fields: self.leases.acquire(
                caller, ttl=int(ttl_seconds), keep=keep, **fields
            ),
            acquired,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        page = read_page(req, FILTERS)
        listed = self.leases.held(
            principal_of(req), before=page.after or None, limit=page.limit + 1, **page.filters
        )
        resp.media = page.answer(
            "leases",
            listed,
            lambda row: row[0].position,
            lambda row: {**row[0].fields, "expired": row[1]},
        )


@dataclass
class Lease:
    contract = get(
        "getLease",
        "The lease, while it is its resource's current term (to its holder or an operator).",
        answer=answers(HOLDING),
    ) | delete(
        "releaseLease",
        "Release the lease (its holder, or an operator of the organization).",
        answer=answers(obj({"lease_id": STRING, "released_at": INSTANT})),
        errors=(OUTCOME_UNKNOWN,),
    )

    leases: LeaseService

    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        holding, expired = self.leases.get(principal_of(req), lease_id)
        fields = {k: iso(v) if isinstance(v, datetime) else v for k, v in asdict(holding).items()}
        resp.media = {"data": {**fields, "expired": expired}}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        released_at = self.leases.release(principal_of(req), lease_id)
        resp.media = {"data": {"lease_id": lease_id, "released_at": iso(released_at)}}


def acquired(holding: Holding) -> dict[str, Any]:
    return {
        "data": {
            "lease_id": holding.lease_id,
            "expires_at": iso(holding.expires_at),
            "fencing_token": holding.fencing_token,
        }
    }
