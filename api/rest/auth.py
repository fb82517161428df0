"""Bearer-key authentication for every resource but the public ones."""

from __future__ import annotations

from typing import Any

import falcon

from titen.api.rest.errors import error
from titen.service.keys import Keys, Principal


class Authentication:
    """Falcon middleware; a resource with `public = True` is served to anyone."""

    def __init__(self, keys: Keys):
        self.keys = keys

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if resource is None or getattr(resource, "public", False):
            return
        scheme, _, key = (req.get_header("Authorization") or "").partition(" ")
        principal = self.keys.authenticate(key.strip()) if scheme.lower() == "bearer" else None
        if principal is None:
            raise error(401)
        req.context.principal = principal


def principal_of(req: falcon.Request) -> Principal:
    return req.context.principal
