"""GET /openapi.json (the machine-readable contract) and GET /docs (the page for people), public.

The page is Redoc from the `openapi-ui-bundles` package, inlined, so it works offline; its
Content-Security-Policy lets it reach this server alone (the bundle's logo on Redocly's CDN is
never requested: tests/e2e/test_docs_page.py watches Chromium's network log).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
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


@dataclass
class OpenAPIDocument:
    contract = operations(
        get=Operation(
            "getOpenAPI",
            "This document: every route, its parameters, bodies, answers and error codes.",
            answer=OPENAPI_DOCUMENT,
            public=True,
        )
    )

    document: dict[str, Any]

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
    """The page with Redoc inlined, and its Content-Security-Policy: the script by its hash,
    Redoc's inline styles, its search worker from a blob, nothing from another origin."""
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
