"""GET /openapi.json, and the two public pages: GET /docs (Redoc over it) and GET /console (the
operators' page), each one HTML answer with its script and style inlined, so it works offline.

The pages hold no data: the console fetches what it shows with the key typed into it (kept in
the tab's sessionStorage). Each page's Content-Security-Policy allows its inline blocks by hash
and connections to this server alone (Redoc's logo on Redocly's CDN is never requested:
tests/e2e/test_docs_page.py watches Chromium's network log).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import falcon
from openapi_ui_bundles import redoc

from titen.api.rest.contract import HTML, Operation, operations
from titen.domain.events import PUBLISHED

STATIC = Path(__file__).with_name("static")  # the console's files, package data
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
        _page(resp, *docs_page())


class Console:
    contract = operations(
        get=Operation(
            "getConsole",
            "The operators' console: held leases, pending handoffs, the live event log, a "
            "resource's history and webhooks, in a browser (docs/console.md).",
            answer=None,
            media=HTML,
            public=True,
        )
    )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        _page(resp, *console_page())
        resp.set_header("Cache-Control", "no-cache")
        resp.set_header("X-Content-Type-Options", "nosniff")
        resp.set_header("Referrer-Policy", "no-referrer")


def _page(resp: falcon.Response, text: str, policy: str) -> None:
    resp.content_type = "text/html; charset=utf-8"
    resp.set_header("Content-Security-Policy", policy)
    resp.text = text


def _policy(*allowed: str) -> str:
    """A Content-Security-Policy allowing nothing but `allowed` (no base, forms or framing)."""
    closed = ("base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'")
    return "; ".join(("default-src 'none'", *allowed, *closed))


def _digest(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


@cache
def docs_page() -> tuple[str, str]:
    """The page with Redoc inlined, and its policy: Redoc's inline styles and its search worker
    from a blob besides the script."""
    script = (redoc.static_path / "redoc.standalone.js").read_text(encoding="utf-8")
    policy = _policy(
        f"script-src '{_digest(script)}'",
        "style-src 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src blob:",
    )
    return PAGE.format(script=script), policy


@cache
def console_page() -> tuple[str, str]:
    style = (STATIC / "console.css").read_text(encoding="utf-8")
    script = (STATIC / "console.js").read_text(encoding="utf-8")
    html = (STATIC / "console.html").read_text(encoding="utf-8")
    text = (
        html.replace("/*STYLE*/", style)
        .replace("/*SCRIPT*/", script)
        .replace("/*TYPES*/", ",".join(PUBLISHED))
    )
    policy = _policy(
        f"script-src '{_digest(script)}'",
        f"style-src '{_digest(style)}'",
        "img-src data:",
        "connect-src 'self'",
    )
    return text, policy
