"""CORS for the web origins `titen serve --cors-origin` names (none by default): Falcon's
CORSMiddleware, on every route and error; a preflight is an OPTIONS, answered without a key.
Credentials mode is never allowed: keys are bearer tokens, so no page gets ambient authority.
"""

from __future__ import annotations

from collections.abc import Iterable

import falcon

from titen.api.rest.jsonrpc import SESSION_HEADER
from titen.api.rest.logs import REQUEST_ID

EXPOSED = (REQUEST_ID, "Idempotent-Replayed", "WWW-Authenticate", "Allow", SESSION_HEADER)


def cors(origins: Iterable[str]) -> falcon.CORSMiddleware:
    return falcon.CORSMiddleware(allow_origins=list(origins), expose_headers=EXPOSED)
