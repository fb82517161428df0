"""GET /console: the operators' page, one HTML answer with its style and script inlined.

Public: the page holds no data; what it shows is fetched with the key typed into it (kept in
the tab's sessionStorage). Its Content-Security-Policy allows exactly its two inline blocks, by
hash, and connections to this server alone.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from pathlib import Path

import falcon

from titen.api.rest.contract import HTML, Operation, operations
from titen.domain.events import PUBLISHED

STATIC = Path(__file__).with_name("static")


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
        text, policy = page()
        resp.content_type = "text/html; charset=utf-8"
        resp.set_header("Content-Security-Policy", policy)
        resp.set_header("Cache-Control", "no-cache")
        resp.set_header("X-Content-Type-Options", "nosniff")
        resp.set_header("Referrer-Policy", "no-referrer")
        resp.text = text


@cache
def page() -> tuple[str, str]:
    style = (STATIC / "console.css").read_text(encoding="utf-8")
    script = (STATIC / "console.js").read_text(encoding="utf-8")
    html = (STATIC / "console.html").read_text(encoding="utf-8")
    text = (
        html.replace("/*STYLE*/", style)
        .replace("/*SCRIPT*/", script)
        .replace("/*TYPES*/", ",".join(PUBLISHED))
    )
    policy = "; ".join(
        (
            "default-src 'none'",
            f"script-src '{_digest(script)}'",
            f"style-src '{_digest(style)}'",
            "img-src data:",
            "connect-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )
    return text, policy


def _digest(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()
