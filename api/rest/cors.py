"""CORS for the web origins `titen serve --cors-origin` names (none by default).

A page served from one of them may call any route: with a key its own server handed it, or, for
the event log, a ticket (service/tickets.py). Falcon's CORSMiddleware answers on every route,
errors included; a preflight is an OPTIONS, answered without a key, its
`Access-Control-Allow-Methods` the route's `Allow` (api/rest/methods.py) and its
`Access-Control-Allow-Headers` what the page asked for. Credentials mode is never allowed: keys
are bearer tokens, not cookies, so no page gets ambient authority from a visitor's browser.
"""

from __future__ import annotations

from collections.abc import Iterable

import falcon

from titen.api.rest.jsonrpc import SESSION_HEADER
from titen.api.rest.logs import REQUEST_ID

EXPOSED = (REQUEST_ID, "Idempotent-Replayed", "WWW-Authenticate", "Allow", SESSION_HEADER)
"""Answer headers a page may read beyond the CORS-safelisted ones (an MCP client in a page
keeps the session id `/mcp` gives it: api/rest/mcp.py)."""


def cors(origins: Iterable[str]) -> falcon.CORSMiddleware:
    return falcon.CORSMiddleware(allow_origins=list(origins), expose_headers=EXPOSED)
