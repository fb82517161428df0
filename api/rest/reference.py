"""GET /openapi.json (the machine-readable contract) and GET /docs (the page for people).

Both are public. The page is Redoc, read from the `openapi-ui-bundles` package and inlined into
one HTML answer, so it works offline and behind firewalls: no CDN, no second request but the
document itself.
"""

from __future__ import annotations

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


class OpenAPIDocument:
    contract = operations(
        get=Operation(
            "getOpenAPI",
            "This document: every route, its parameters, bodies, answers and error codes.",
            answer={"type": "object", "required": ["openapi", "paths"]},
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
        resp.content_type = "text/html; charset=utf-8"
        resp.text = page()


@cache
def page() -> str:
    """The reference page with Redoc inlined (read once, on the first request)."""
    script = (redoc.static_path / "redoc.standalone.js").read_text(encoding="utf-8")
    return PAGE.format(script=script)
