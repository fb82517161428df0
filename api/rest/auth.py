"""Bearer-key authentication for every resource but the public ones."""

from __future__ import annotations

from typing import Any

import falcon

from titen.api.rest.errors import error
from titen.api.rest.methods import contract_method
from titen.service.keys import Keys, Principal, key_hash


class Authentication:
    """Falcon middleware; an operation its contract declares `public` is served to anyone, and
    so is OPTIONS (what a route allows is no secret, and a CORS preflight carries no key).

    The key's hash stays in `req.context.key_hash`, so a subscription opened with the key can
    watch for its revocation (service/revocations.py).
    """

    def __init__(self, keys: Keys):
        self.keys = keys

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if resource is None or req.method == "OPTIONS":
            return
        operation = getattr(resource, "contract", {}).get(contract_method(req))
        if operation is not None and operation.public:
            return
        scheme, _, key = (req.get_header("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer":
            raise error(401)
        hashed = key_hash(key.strip())
        req.context.key_generation = self.keys.generation
        principal = self.keys.authenticate_hash(hashed)
        if principal is None:
            raise error(401)
        req.context.principal = principal
        req.context.key_hash = hashed


def principal_of(req: falcon.Request) -> Principal:
    return req.context.principal


def key_of(req: falcon.Request) -> tuple[str, int]:
    """The hash of the key the request was authenticated with, and the key cache's generation
    before it was (what `Revocations.watch` takes)."""
    return req.context.key_hash, req.context.key_generation
