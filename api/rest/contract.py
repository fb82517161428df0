"""What each route promises, declared beside its resource: `contract = operations(...)`.

A resource class states, per HTTP method, its request body (one of titen.api.schemas, the same
dictionary that validates requests), its query parameters, its success answer and the error
codes it can answer. `titen.api.rest.openapi` turns these into the OpenAPI document; nothing
else restates them. A route whose responder has no contract (or the reverse) fails
tests/api/test_openapi.py, so adding a route means adding its contract here, next to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from titen.api.rest.errors import CODES, OUTCOME_UNKNOWN

# Codes some routes answer beyond the one-per-status table in errors.CODES.
IDEMPOTENCY_KEY_IN_USE = "IDEMPOTENCY_KEY_IN_USE"
IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
TOO_MANY_SUBSCRIBERS = "TOO_MANY_SUBSCRIBERS"
STATUS_OF = {
    **{code: status for status, code in CODES.items()},
    IDEMPOTENCY_KEY_IN_USE: 409,
    IDEMPOTENCY_KEY_REUSED: 422,
    TOO_MANY_SUBSCRIBERS: 429,
    OUTCOME_UNKNOWN: 503,
}
JSON = "application/json"
EVENT_STREAM = "text/event-stream"
HTML = "text/html"


@dataclass(frozen=True)
class Link:
    """An OpenAPI link: a later operation takes a parameter from this one's answer."""

    operation: str
    """The operationId it leads to."""
    parameters: dict[str, str]
    """Parameter name → runtime expression, e.g. {"lease_id": "$response.body#/data/lease_id"}."""


@dataclass(frozen=True)
class Operation:
    """One method of one route, as the OpenAPI document shows it."""

    operation_id: str
    summary: str
    answer: dict[str, Any] | None
    """JSON Schema of the success body (usually `answers(data_schema)`), or of each frame of
    a text/event-stream; None for a page (`media` names its type)."""
    status: int = 200
    also: tuple[int, ...] = ()
    """Further statuses that answer the same success body (not the error envelope)."""
    bodiless: tuple[int, ...] = ()
    """Success statuses answered with no body (the MCP endpoint's 202 to a notification)."""
    description: str = ""
    body: dict[str, Any] | None = None
    """The request body's JSON Schema (from titen.api.schemas), when the route takes one."""
    query: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Query parameter name → JSON Schema."""
    required_query: tuple[str, ...] = ()
    headers: tuple[dict[str, Any], ...] = ()
    """Further header parameters (OpenAPI Parameter Objects with `in: header`)."""
    errors: tuple[str, ...] = ()
    """Error codes beyond those every route of its kind answers (see `error_codes`)."""
    public: bool = False
    """Served without an API key."""
    tickets: bool = False
    """Also served with a ticket (`?ticket=`, from POST /v1/events/tickets) instead of a key."""
    media: str = JSON
    links: dict[str, Link] = field(default_factory=dict)
    idempotent: bool = False
    """Takes an Idempotency-Key header (titen.api.rest.idempotency); like every write, it may
    then answer OUTCOME_UNKNOWN."""
    error_schema: str = "Error"
    """The component schema of its error answers: the envelope, or the MCP endpoint's JSON-RPC
    error (which `components` then defines)."""
    protocol_errors: tuple[int, ...] = ()
    """Further statuses a protocol answers itself, in `error_schema`'s shape (the MCP SDK's)."""
    components: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Named schemas its own schemas refer to (`{"$ref": "#/components/schemas/<name>"}`)."""

    def error_codes(self) -> list[str]:
        """Every code this operation can answer, in status order. Any request can be refused
        for a head over 64 KiB (HEADERS_TOO_LARGE), before its route is known."""
        codes = {*self.errors, CODES[431], CODES[500]}
        if not self.public:  # every route behind a key reads the database: 503 in an outage,
            # and counts against the organization's request budget (api/rest/budget.py)
            codes |= {CODES[401], CODES[429], CODES[503]}
        if self.body is not None:
            codes |= {CODES[400], CODES[413], CODES[415]}
        if self.query:
            codes.add(CODES[400])
        if self.idempotent:
            codes |= {CODES[400], IDEMPOTENCY_KEY_IN_USE, IDEMPOTENCY_KEY_REUSED, OUTCOME_UNKNOWN}
        return sorted(codes, key=lambda code: (STATUS_OF[code], code))


Contract = dict[str, Operation]


def operations(**by_method: Operation) -> Contract:
    """A resource's contract: `operations(get=Operation(...), post=Operation(...))`."""
    return {method.upper(): operation for method, operation in by_method.items()}


def answers(data: dict[str, Any]) -> dict[str, Any]:
    """The schema of a success body: `{"data": …}`."""
    return obj({"data": data})


def obj(properties: dict[str, Any], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object with exactly these properties, all present unless named optional."""
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def ref(name: str) -> dict[str, Any]:
    """A reference to a named schema of the document's components."""
    return {"$ref": f"#/components/schemas/{name}"}


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


STRING: dict[str, Any] = {"type": "string"}
INTEGER: dict[str, Any] = {"type": "integer"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
INSTANT: dict[str, Any] = {"type": "string", "format": "date-time"}
"""An instant as `titen.domain.clock.iso` writes it: UTC, milliseconds, `Z`."""
