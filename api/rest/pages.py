"""GET /openapi.json, and the two public pages: GET /docs (Redoc over it) and GET /console (the
operators' page), each one HTML answer (static/) with its script and style inlined, so it works
offline. The pages hold no data (the console fetches with the key typed into it); each page's
Content-Security-Policy allows its inline blocks by hash and connections to this server alone.
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

from titen.api.rest.contract import HTML, OPEN, STRING, Contract, array, get, obj
from titen.domain.events import PUBLISHED

STATIC = Path(__file__).with_name("static")  # the pages, package data
OPENAPI_DOCUMENT = {
    **obj(
        {
            "openapi": STRING,
            "info": OPEN,
            "servers": array(OPEN),
            "paths": OPEN,
            "components": OPEN,
            "security": array(OPEN),
        },
        optional=("servers", "components", "security"),
    ),
    "description": "An OpenAPI 3.1 document (its schema: https://spec.openapis.org/oas/3.1).",
    "additionalProperties": True,
}


@dataclass
class OpenAPIDocument:
    contract = get(
        "getOpenAPI",
        "This document: every route, its parameters, bodies, answers and error codes.",
        answer=OPENAPI_DOCUMENT,
        public=True,
    )

    document: dict[str, Any]

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.document


def _page(operation_id: str, summary: str) -> Contract:
    return get(operation_id, summary, answer=None, media=HTML, public=True)


class Docs:
    contract = _page("getDocs", "The API reference as a web page (Redoc over /openapi.json).")

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        _answer(resp, *docs_page())


class Console:
    contract = _page(
        "getConsole",
        "The operators' console: held leases, pending handoffs, the live event log, a "
        "resource's history and webhooks, in a browser (docs/console.md).",
    )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        _answer(resp, *console_page())
        resp.set_headers(
            {
                "Cache-Control": "no-cache",
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
            }
        )


def _answer(resp: falcon.Response, text: str, policy: str) -> None:
    resp.content_type = "text/html; charset=utf-8"
    resp.set_header("Content-Security-Policy", policy)
    resp.text = text


def _policy(*allowed: str) -> str:
    """A Content-Security-Policy allowing nothing but `allowed` (no base, forms or framing)."""
    closed = ("base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'")
    return "; ".join(("default-src 'none'", *allowed, *closed))


def _digest(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def _inlined(name: str, script: str, style: str = "") -> str:
    html = (STATIC / f"{name}.html").read_text(encoding="utf-8")
    return html.replace("/*STYLE*/", style).replace("/*SCRIPT*/", script)


@cache
def docs_page() -> tuple[str, str]:
    """Redoc's page and policy: its inline styles and its search worker from a blob too."""
    script = (redoc.static_path / "redoc.standalone.js").read_text(encoding="utf-8")
    policy = _policy(
        f"script-src '{_digest(script)}'",
        "style-src 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src blob:",
    )
    return _inlined("docs", script), policy


@cache
def console_page() -> tuple[str, str]:
    style = (STATIC / "console.css").read_text(encoding="utf-8")
    script = (STATIC / "console.js").read_text(encoding="utf-8")
    text = _inlined("console", script, style).replace("/*TYPES*/", ",".join(PUBLISHED))
    policy = _policy(
        f"script-src '{_digest(script)}'",
        f"style-src '{_digest(style)}'",
        "img-src data:",
        "connect-src 'self'",
    )
    return text, policy
