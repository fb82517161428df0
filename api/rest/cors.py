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
from urllib.parse import urlsplit

import falcon

from titen.api.rest.jsonrpc import SESSION_HEADER
from titen.api.rest.logs import REQUEST_ID

EXPOSED = (REQUEST_ID, "Idempotent-Replayed", "WWW-Authenticate", "Allow", SESSION_HEADER)
"""Answer headers a page may read beyond the CORS-safelisted ones (an MCP client in a page
keeps the session id `/mcp` gives it: api/rest/mcp.py)."""
DEFAULT_PORTS = {"http": 80, "https": 443}


def cors(origins: Iterable[str]) -> falcon.CORSMiddleware:
    return falcon.CORSMiddleware(allow_origins=list(origins), expose_headers=EXPOSED)


def parse_origin(text: str) -> str:
    """An origin as a browser sends it in `Origin` (`scheme://host[:port]`, lower case, no
    default port), or ValueError: anything else would silently never match."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or parts.scheme not in DEFAULT_PORTS
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or text.endswith("/")
        or parts.path
        or parts.query
        or parts.fragment
        or "?" in text
        or "#" in text
    ):
        raise ValueError(
            f"{text!r} is not an origin: scheme://host[:port], e.g. https://app.example.com"
        )
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    shown_port = "" if port in (None, DEFAULT_PORTS[parts.scheme]) else f":{port}"
    return f"{parts.scheme}://{host}{shown_port}"
