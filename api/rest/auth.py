"""Who is calling: a bearer key, or on the event log's reads a ticket; public operations and
OPTIONS need neither. GET /v1/me tells a key what its role lets it do (as `Principal` decides),
so a page shows only what works without restating the role list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import falcon

from titen.api.rest.budget import over_budget
from titen.api.rest.contract import BOOLEAN, STRING, answers, get, obj
from titen.api.rest.errors import error
from titen.api.rest.methods import contract_method
from titen.api.rest.paging import single
from titen.service.budget import OrgBudget
from titen.service.keys import Keys, Principal, key_hash
from titen.service.tickets import Tickets

TICKET = "ticket"
BAD_TICKET = (
    "The ticket is unknown, expired, or its key was revoked: ask POST /v1/events/tickets for "
    "a new one."
)


@dataclass
class Authentication:
    """Falcon middleware. Without an Authorization header, an operation that takes `tickets`
    serves a `?ticket=` as its key's principal; `req.context.key_hash` (a ticket's key's) lets a
    subscription watch for its revocation. With a `budget`, a request is counted against its
    organization's before any database read when the key is cached (its organization is fixed).
    """

    keys: Keys
    tickets: Tickets
    budget: OrgBudget | None = None

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if resource is None or req.method == "OPTIONS":
            return
        operation = getattr(resource, "contract", {}).get(contract_method(req))
        if operation is not None and operation.public:
            return
        # Read before the lookup: a later revocation is then noticed by `watch`.
        req.context.key_generation = self.keys.generation
        header = req.get_header("Authorization")
        if header is None and operation is not None and operation.tickets and TICKET in req.params:
            redeemed = self.tickets.redeem(single(req.params, TICKET) or "")
            if redeemed is None:
                raise error(401, BAD_TICKET)
            principal, hashed = redeemed.principal, redeemed.key_hash
            self._spend(principal.organization)
        else:
            principal, hashed = by_key(self.keys, header or "", self._spend)
        req.context.principal = principal
        req.context.key_hash = hashed

    def _spend(self, organization: str) -> None:
        if self.budget is not None and (wait := self.budget.wait(organization)) > 0:
            raise over_budget(self.budget.policy, wait)


def by_key(
    keys: Keys, header: str, spend: Callable[[str], None] = lambda organization: None
) -> tuple[Principal, str]:
    """The principal of a `Bearer` Authorization header and its key's hash, 401 otherwise;
    `spend(organization)` comes before any database read when the key is cached."""
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer":
        raise error(401)
    hashed = key_hash(key.strip())
    cached = keys.cached(hashed)
    if cached is not None:
        spend(cached.organization)
    principal = keys.authenticate_hash(hashed)
    if principal is None:
        raise error(401)
    if cached is None:
        spend(principal.organization)
    return principal, hashed


def principal_of(req: falcon.Request) -> Principal:
    return req.context.principal


def key_of(req: falcon.Request) -> tuple[str, int]:
    """The request's key hash and the key cache's generation before it (`Revocations.watch`)."""
    return req.context.key_hash, req.context.key_generation


IDENTITY = {  # each field GET /v1/me answers: its schema, and the Principal's attribute it shows
    "organization": (STRING, "organization"),
    "principal": (STRING, "name"),
    "role": (STRING, "role"),
    "reads_organization": (BOOLEAN, "reads_organization"),
    "releases_any_lease": (BOOLEAN, "is_operator"),
    "reads_audit": (BOOLEAN, "is_operator"),
}


class Me:
    contract = get(
        "getIdentity",
        "The key's organization, principal and role, and what the role may do.",
        answer=answers(obj({name: schema for name, (schema, _) in IDENTITY.items()})),
        description="`reads_organization`: lists the organization's leases and pending "
        "handoffs (else only the caller's own); `releases_any_lease`: may release another "
        "principal's lease; `reads_audit`: may read the audit routes.",
    )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        caller = principal_of(req)
        resp.set_header("Cache-Control", "no-store")
        resp.media = {
            "data": {name: getattr(caller, shown) for name, (_, shown) in IDENTITY.items()}
        }
