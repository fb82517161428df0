"""HEAD wherever GET is, and OPTIONS everywhere with the `Allow` of the route's 405 (Falcon's
OPTIONS leaves OPTIONS out of `Allow`). HEAD runs the GET responder and Falcon drops the body;
a responder that would hold something open for the body (the event stream) checks `is_head`."""

from __future__ import annotations

from typing import Any

import falcon
import falcon.inspect
from falcon.responders import create_default_options
from falcon.routing import CompiledRouter


class Router(CompiledRouter):
    def map_http_methods(self, resource: object, **kwargs: Any) -> dict[str, Any]:
        methods: dict[str, Any] = super().map_http_methods(resource, **kwargs)
        if "GET" in methods:
            methods.setdefault("HEAD", methods["GET"])
        allowed = sorted({*methods, "OPTIONS"})  # as Falcon's 405 writes `Allow`
        methods.setdefault("OPTIONS", create_default_options(allowed))
        return methods


# The routes stay readable by falcon.inspect (tests/api/test_openapi.py reads them so).
falcon.inspect.register_router(Router)(falcon.inspect.inspect_compiled_router)


def is_head(req: falcon.Request) -> bool:
    return req.method == "HEAD"


def contract_method(req: falcon.Request) -> str:
    """The method whose contract governs the request: a HEAD is its GET without the body."""
    return "GET" if is_head(req) else req.method
