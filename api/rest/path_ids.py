"""Ids in a request's path: one holding a control character names nothing, so it is not found.

Every id titen issues is a prefix and hex digits, so such an id cannot exist; refusing it before
any lookup keeps it from every store (PostgreSQL's text cannot hold NUL: the query itself would
fail, a 500 for what is a bad id).
"""

from __future__ import annotations

import re
from typing import Any

import falcon

from titen.api.rest.errors import error

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class PathIds:
    """Falcon middleware, after authentication: a 404 for an id with a control character."""

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if any(isinstance(value, str) and CONTROL.search(value) for value in params.values()):
            raise error(404)
