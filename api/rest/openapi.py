"""The OpenAPI 3.1 document, built from the contracts declared beside each resource: pure, so
`titen openapi` prints the document the server serves without opening a database."""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import groupby
from typing import Any

from titen.api.rest.contract import JSON, STATUS_OF, STRING, Contract, Operation, obj, ref

VERSION = "0.1.0"
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "Makes a retry safe: the first successful answer is stored for 24 h and a repeat with "
        "the same key and body gets it again (`Idempotent-Replayed: true`) without running "
        "twice. 1-255 printable ASCII characters, no spaces (docs/idempotency.md)."
    ),
    "schema": {"type": "string", "pattern": "^[!-~]{1,255}$"},
}


def _header(description: str, **schema: Any) -> dict[str, Any]:
    """A response header: a string, with its `schema`'s constraints."""
    return {"description": description, "schema": {"type": "string", **schema}}


REPLAYED = _header(
    "`true` when this answer is the stored one of an earlier identical request.", enum=["true"]
)
RETRY_AFTER = _header("Seconds to wait before retrying.", pattern="^[0-9]+$")
WWW_AUTHENTICATE = _header("`Bearer`: the scheme a key is sent with.", enum=["Bearer"])
LICENSE = {"name": "Proprietary", "identifier": "LicenseRef-Proprietary"}  # all rights reserved
SERVERS = [{"url": "/", "description": "The server that serves this document."}]
RATE_LIMIT = {
    "RateLimit-Policy": _header(
        "The organization's budget (draft-ietf-httpapi-ratelimit-headers): "
        '`"org";q=BURST;w=SECONDS`.'
    ),
    "RateLimit": _header(
        'What is left of it: `"org";r=0;t=SECONDS` (seconds until one more request is allowed).'
    ),
}
"""The headers of a 429 TOO_MANY_REQUESTS (api/rest/budget.py)."""
HEADERS = {
    401: {"WWW-Authenticate": WWW_AUTHENTICATE},
    429: {"Retry-After": RETRY_AFTER, **RATE_LIMIT},
    503: {"Retry-After": RETRY_AFTER},
}
REASONS = {
    400: "The request is malformed; the message names the field.",
    401: "No valid API key.",
    403: "The key's role may not do this.",
    404: "Not found, or not visible to the caller.",
    406: "The Accept header does not take application/json.",
    409: "Conflict with the current state.",
    413: "The request body is larger than 1 MiB.",
    415: "The request body is not JSON.",
    422: "The Idempotency-Key was used with a different request body.",
    429: "Over a quota: the organization's request budget on this server "
    "(TOO_MANY_REQUESTS: retry after Retry-After), or the caller's subscriptions "
    "(TOO_MANY_SUBSCRIBERS: close one).",
    431: "The request head is larger than 64 KiB (refused before its route is known, so in "
    "the envelope on every route).",
    500: "Internal error.",
    503: "Unavailable for now; retry.",
}
ERROR_CODE = {
    "type": "string",
    "description": "What went wrong, for a program to act on; `message` says it in words.",
    "enum": sorted(STATUS_OF, key=lambda code: (STATUS_OF[code], code)),
}
ERROR = {
    **obj({"error": obj({"code": ref("ErrorCode"), "message": STRING})}),
    "description": "Every error answer but `/mcp`'s.",
}


def document(routes: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """The document for a route table of (URI template, resource class or instance)."""
    paths: dict[str, Any] = {}
    named: dict[str, Any] = {}
    for template, resource in routes:
        contract: Contract = resource.contract
        paths[template] = {
            method.lower(): _operation(template, operation)
            for method, operation in contract.items()
        }
        for operation in contract.values():
            named.update(operation.components)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Titen",
            "version": VERSION,
            "summary": "Leases and handoffs for AI agents.",
            "description": (
                'Every error answers `{"error": {"code", "message"}}` (`Error`; on `/mcp`, '
                "a JSON-RPC error with the code in `error.data.code`); each response names "
                "the codes it can answer. Keys are `titen keys create` bearer tokens. Every "
                "GET route also answers HEAD (no body), and every route OPTIONS (no key "
                "needed; its `Allow` is the one a 405 carries): not listed per path."
            ),
            "license": LICENSE,
        },
        "servers": SERVERS,
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key from `titen keys create`.",
                },
                "ticket": {
                    "type": "apiKey",
                    "in": "query",
                    "name": "ticket",
                    "description": "A ticket from `POST /v1/events/tickets`, for a browser's "
                    "EventSource (which cannot send a key): read-only, 10 minutes, ended with "
                    "its key. Used only when no Authorization header is sent.",
                },
            },
            "schemas": {"ErrorCode": ERROR_CODE, "Error": ERROR, **named},
        },
        "security": [{"bearer": []}],
    }


def _operation(template: str, operation: Operation) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "operationId": operation.operation_id,
        "summary": operation.summary,
        "parameters": _parameters(template, operation),
        "responses": _responses(template, operation),
    }
    if operation.description:
        spec["description"] = operation.description
    if operation.public:
        spec["security"] = []
    elif operation.tickets:
        spec["security"] = [{"bearer": []}, {"ticket": []}]
    if operation.body is not None:
        spec["requestBody"] = {"required": True, "content": {JSON: {"schema": operation.body}}}
    return spec


def _parameters(template: str, operation: Operation) -> list[dict[str, Any]]:
    path = [
        {"name": name, "in": "path", "required": True, "schema": STRING}
        for name in re.findall(r"{(\w+)}", template)
    ]
    query = [
        {
            "name": name,
            "in": "query",
            "required": name in operation.required_query,
            "schema": schema,
        }
        for name, schema in operation.query.items()
    ]
    return [*path, *query, *operation.headers, *([IDEMPOTENCY_KEY] if operation.idempotent else [])]


def _responses(template: str, operation: Operation) -> dict[str, Any]:
    success: dict[str, Any] = {
        "description": operation.summary,
        "content": {operation.media: {"schema": operation.answer or STRING}},
    }
    if operation.idempotent:
        success["headers"] = {"Idempotent-Replayed": REPLAYED}
    if operation.links:
        success["links"] = {
            name: {"operationId": link.operation, "parameters": link.parameters}
            for name, link in operation.links.items()
        }
    responses = {str(status): success for status in (operation.status, *operation.also)}
    responses |= {
        str(status): {"description": "Accepted; no body."} for status in operation.bodiless
    }
    for status, codes in groupby(operation.error_codes(template), STATUS_OF.__getitem__):
        shape = "Error" if status == 431 else operation.error_schema
        responses[str(status)] = {
            "description": f"{REASONS[status]} Codes: {', '.join(codes)}.",
            "content": {JSON: {"schema": ref(shape)}},
            **({"headers": HEADERS[status]} if status in HEADERS else {}),
        }
    protocol = "The protocol's own error (JSON-RPC)."
    for status in operation.protocol_errors:  # in the operation's error shape
        if str(status) in responses:
            responses[str(status)]["description"] += f" Or: {protocol}"
        else:
            responses[str(status)] = {
                "description": f"{REASONS[status]} {protocol}",
                "content": {JSON: {"schema": ref(operation.error_schema)}},
            }
    return responses
