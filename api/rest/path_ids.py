"""A path id holding a control character names nothing: 404 before any lookup (PostgreSQL's
text cannot hold NUL: the query would fail, a 500 for a bad id)."""

from __future__ import annotations

import re
from typing import Any

import falcon

from titen.api.rest.errors import error

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class PathIds:
    """Falcon middleware, after authentication."""

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if any(isinstance(value, str) and CONTROL.search(value) for value in params.values()):
            raise error(404)
