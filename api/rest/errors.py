"""The one error envelope, {"error": {"code", "message"}} (on `/mcp` a JSON-RPC error), and the
one map of failures to it."""

from __future__ import annotations

import json
import logging
from typing import Any

import falcon

from titen.api.rest import jsonrpc
from titen.api.validation import cut
from titen.domain.clock import iso
from titen.domain.errors import Contention, Forbidden, InvalidField, LeaseHeld, NotFound, NotTarget
from titen.service.outages import ClockDisagrees, OutcomeUnknown, is_outage

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
CLOCK_DISAGREES = "This node could not agree with the database's clock; nothing was saved; retry."
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
        retry = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        headers = {401: {"WWW-Authenticate": "Bearer"}, 429: retry, 503: retry}.get(status)
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
    error handler and the MCP tools alike)."""
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
    if isinstance(exc, ClockDisagrees):
        return Refusal(503, CLOCK_DISAGREES)
    if is_outage(exc):
        return Refusal(503, OUTAGE)
    return None


def message_of(refused: falcon.HTTPError) -> str:
    return refused.description or DEFAULT_MESSAGES.get(refused.status_code) or refused.title


def _answer(req: falcon.Request, resp: falcon.Response, exc: Exception, params: Any) -> None:
    """Any failure: a refusal in its words; an outage (nothing changed: retry) also a warning
    without a traceback, for it is a condition, not a defect; anything else a logged 500."""
    refused = refusal_of(exc)
    where = {"fields": {"request_id": req.context.get("request_id")}}
    if refused is None:
        log.exception("unhandled error on %s %s", req.method, req.path, extra=where)
        raise error(500)
    if is_outage(exc):
        what = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
        log.warning("database unavailable on %s %s: %s", req.method, req.path, what, extra=where)
    raise refused


def install(app: falcon.App) -> None:
    app.set_error_serializer(serialize)
    app.add_error_handler(Exception, _answer)
