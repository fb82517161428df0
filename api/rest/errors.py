"""The one error envelope, {"error": {"code", "message"}} (on `/mcp` a JSON-RPC error), and the
one map of failures to it."""

from __future__ import annotations

import json
import logging
from typing import Any

import falcon

from titen.api.rest import jsonrpc
from titen.api.rest.logs import request_id
from titen.api.validation import cut
from titen.domain.clock import iso
from titen.domain.errors import (
    Contention,
    Forbidden,
    InvalidField,
    LeaseHeld,
    NotFound,
    NotTarget,
)
from titen.service.outages import (
    CANDIDATES,
    ClockDisagrees,
    OutcomeUnknown,
    is_outage,
    is_unwrapped_outage,
)

log = logging.getLogger("titen.api")
OWN_WORDS: dict[type[Exception], int] = {Forbidden: 403, InvalidField: 400, Contention: 503}
"""Refusals answered in their own message, by status."""

CODES = {
    400: "VALIDATION_ERROR",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "REQUEST_TIMEOUT",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "TOO_MANY_REQUESTS",
    431: "HEADERS_TOO_LARGE",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    505: "HTTP_VERSION_NOT_SUPPORTED",
}
DEFAULT_MESSAGES = {
    401: "A valid API key is required: authorization: Bearer <key>.",
    403: "This operation needs the operator role.",
    404: "Not found.",
    405: "Method not allowed on this resource.",
    413: "The request body is larger than 1 MiB.",
    415: "The request body must be JSON (content-type: application/json).",
    500: "Internal error.",
    503: "The service is unavailable; retry.",
}
OUTAGE = "The database is unavailable; retry shortly."
OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
"""The 503 whose change may have been saved (UNAVAILABLE: nothing changed): a retry with the
same Idempotency-Key learns the outcome."""
RETRY_AFTER_SECONDS = 2  # with every 503 and 429


class Refusal(falcon.HTTPError):
    """An error answer with its envelope code (the status's own unless named), and on `/mcp`
    its JSON-RPC code when not the status's own (jsonrpc.rpc_code)."""

    def __init__(
        self,
        status: int,
        message: str | None = None,
        code: str | None = None,
        rpc: int | None = None,
    ):
        headers = None
        if status == 401:
            headers = {"WWW-Authenticate": "Bearer"}
        elif status in (429, 503):
            headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        super().__init__(status, description=message, headers=headers)
        self.envelope_code = code
        self.rpc_code = rpc


error = Refusal


def code_for(status: int) -> str:
    return CODES.get(status, "INTERNAL" if status >= 500 else "VALIDATION_ERROR")


def serialize(req: falcon.Request, resp: falcon.Response, exc: falcon.HTTPError) -> None:
    status = exc.status_code
    code = getattr(exc, "envelope_code", None) or code_for(status)
    rpc = getattr(exc, "rpc_code", None)
    resp.content_type = falcon.MEDIA_JSON
    resp.text = json.dumps(envelope(req.path, status, code, message_of(exc), rpc))


def envelope(
    path: str, status: int, code: str, message: str, rpc: int | None = None
) -> dict[str, Any]:
    if path == jsonrpc.PATH:
        return jsonrpc.error(code, message, rpc or jsonrpc.rpc_code(status))
    return {"error": {"code": code, "message": message}}


def refusal_of(exc: Exception) -> Refusal | None:
    """The answer to a domain refusal or a database outage, None for anything else (for REST's
    error handlers and the MCP tools alike)."""
    if isinstance(exc, LeaseHeld):
        return Refusal(409, f"Resource is leased by another principal until {iso(exc.expires_at)}.")
    if isinstance(exc, NotFound):  # its message names the id asked for: cut, it may be huge
        return Refusal(404, cut(str(exc)) or None)
    if isinstance(exc, NotTarget):
        return Refusal(400, "Only the target principal can resolve a handoff.")
    for kind, status in OWN_WORDS.items():
        if isinstance(exc, kind):
            return Refusal(status, str(exc))
    if isinstance(exc, OutcomeUnknown):
        return Refusal(503, exc.answer, OUTCOME_UNKNOWN)
    if is_outage(exc):
        return Refusal(503, OUTAGE)
    return None


def message_of(refused: falcon.HTTPError) -> str:
    return refused.description or DEFAULT_MESSAGES.get(refused.status_code) or refused.title


def _domain(req: falcon.Request, resp: falcon.Response, exc: Exception, params: Any) -> None:
    raise refusal_of(exc) or exc


def _outage(req: falcon.Request, resp: falcon.Response, exc: Exception, params: Any) -> None:
    """Nothing was changed: retry. A condition, not a defect: a warning without a traceback."""
    if not is_outage(exc):
        _unexpected(req, resp, exc, params)
    log.warning(
        "database unavailable on %s %s: %s: %s",
        req.method,
        req.path,
        type(exc).__name__,
        str(exc).splitlines()[0] if str(exc) else "",
        extra={"fields": {"request_id": request_id(req)}},
    )
    if isinstance(exc, OutcomeUnknown):
        raise error(503, exc.answer, code=OUTCOME_UNKNOWN)
    if isinstance(exc, ClockDisagrees):
        raise error(
            503, "This node could not agree with the database's clock; nothing was saved; retry."
        )
    raise error(503, OUTAGE)


def _unexpected(req: falcon.Request, resp: falcon.Response, exc: Exception, params: Any) -> None:
    if isinstance(exc, falcon.HTTPError):
        raise exc
    if is_unwrapped_outage(exc):  # psycopg's own, which REST does not name (storage/outages.py)
        return _outage(req, resp, exc, params)
    log.exception(
        "unhandled error on %s %s",
        req.method,
        req.path,
        extra={"fields": {"request_id": request_id(req)}},
    )
    raise error(500)


def install(app: falcon.App) -> None:
    app.set_error_serializer(serialize)
    app.add_error_handler(Exception, _unexpected)
    for kind in (LeaseHeld, NotFound, NotTarget, *OWN_WORDS):
        app.add_error_handler(kind, _domain)
    for outage in CANDIDATES:
        app.add_error_handler(outage, _outage)
