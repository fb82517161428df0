"""GET /openapi.json (the machine-readable contract) and GET /docs (the page for people).

Both are public. The page is Redoc, read from the `openapi-ui-bundles` package and inlined into
one HTML answer, so it works offline and behind firewalls: no CDN, no second request but the
document itself. Its Content-Security-Policy lets the page reach this server alone: the bundle
still names one image on Redocly's CDN (a logo beside "API docs by Redocly"), which the browser
then never requests (it shows the link without it), and neither would anything a later bundle
adds (tests/e2e/test_docs_page.py watches Chromium's network log).
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from typing import Any

import falcon
from openapi_ui_bundles import redoc

from titen.api.rest.contract import HTML, Operation, operations

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Titen API reference</title>
<style>body {{ margin: 0; padding: 0; }}</style>
</head>
<body>
<redoc spec-url="/openapi.json" hide-download-button="false"></redoc>
<script>{script}</script>
</body>
</html>
"""


OPENAPI_DOCUMENT = {
    "type": "object",
    "description": "An OpenAPI 3.1 document (its schema: https://spec.openapis.org/oas/3.1).",
    "properties": {
        "openapi": {"type": "string"},
        "info": {"type": "object", "additionalProperties": True},
        "servers": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
        "paths": {"type": "object", "additionalProperties": True},
        "components": {"type": "object", "additionalProperties": True},
        "security": {"type": "array", "items": {"type": "object", "additionalProperties": True}},
    },
    "required": ["openapi", "info", "paths"],
    "additionalProperties": True,
}


class OpenAPIDocument:
    contract = operations(
        get=Operation(
            "getOpenAPI",
            "This document: every route, its parameters, bodies, answers and error codes.",
            answer=OPENAPI_DOCUMENT,
            public=True,
        )
    )

    def __init__(self, document: dict[str, Any]):
        self.document = document

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.document


class Docs:
    contract = operations(
        get=Operation(
            "getDocs",
            "The API reference as a web page (Redoc over /openapi.json).",
            answer=None,
            media=HTML,
            public=True,
        )
    )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        text, policy = page()
        resp.content_type = "text/html; charset=utf-8"
        resp.set_header("Content-Security-Policy", policy)
        resp.text = text


@cache
def page() -> tuple[str, str]:
    """The reference page with Redoc inlined, and its Content-Security-Policy (made once, on
    the first request): the inlined script by its hash, Redoc's own inline styles, the search
    worker it starts from a blob, and nothing from another origin."""
    script = (redoc.static_path / "redoc.standalone.js").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    policy = "; ".join(
        (
            "default-src 'none'",
            f"script-src 'sha256-{digest}'",
            "style-src 'unsafe-inline'",
            "img-src 'self' data:",
            "font-src 'self' data:",
            "connect-src 'self'",
            "worker-src blob:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )
    return PAGE.format(script=script), policy
