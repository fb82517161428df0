"""What each route promises, declared beside its resource: `contract = get(...) | post(...)`, per
HTTP method its body, query, success answer and error codes, from which `titen.api.rest.openapi`
builds the OpenAPI document (a responder without one fails tests/api/test_openapi.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ParamSpec, get_args, get_type_hints

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
P = ParamSpec("P")


@dataclass(frozen=True)
class Link:
    """A later operation takes a parameter from this one's answer: name → runtime expression."""

    operation: str
    parameters: dict[str, str]


@dataclass(frozen=True)
class Operation:
    """One method of one route, as the OpenAPI document shows it."""

    operation_id: str
    summary: str
    answer: dict[str, Any] | None
    """JSON Schema of the success body, or of each text/event-stream frame; None for a page."""
    status: int = 200
    also: tuple[int, ...] = ()  # further statuses answering the same success body
    bodiless: tuple[int, ...] = ()  # success statuses without a body (MCP's 202)
    description: str = ""
    body: dict[str, Any] | None = None  # the request body's schema (titen.api.schemas)
    query: dict[str, dict[str, Any]] = field(default_factory=dict)
    required_query: tuple[str, ...] = ()
    headers: tuple[dict[str, Any], ...] = ()  # OpenAPI Parameter Objects, `in: header`
    errors: tuple[str, ...] = ()  # beyond those every route of its kind answers
    public: bool = False  # served without an API key
    tickets: bool = False  # also served with `?ticket=` (POST /v1/events/tickets)
    media: str = JSON
    links: dict[str, Link] = field(default_factory=dict)
    idempotent: bool = False  # takes Idempotency-Key, and may answer OUTCOME_UNKNOWN
    error_schema: str = "Error"  # or the MCP endpoint's JSON-RPC error (in `components`)
    protocol_errors: tuple[int, ...] = ()  # answered by a protocol itself (the MCP SDK)
    components: dict[str, dict[str, Any]] = field(default_factory=dict)  # named schemas

    def error_codes(self, template: str) -> list[str]:
        """Every code this operation on `template` can answer, in status order (431 before any
        route; 404 for an id in the path)."""
        codes = {*self.errors, CODES[431], CODES[500]}
        if "{" in template:
            codes.add(CODES[404])
        if not self.public:  # a key is looked up (503 in an outage) and counted (budget.py)
            codes |= {CODES[401], CODES[429], CODES[503]}
        if self.body is not None:
            codes |= {CODES[400], CODES[413], CODES[415]}
        if self.query:
            codes.add(CODES[400])
        if self.idempotent:
            codes |= {CODES[400], IDEMPOTENCY_KEY_IN_USE, IDEMPOTENCY_KEY_REUSED, OUTCOME_UNKNOWN}
        return sorted(codes, key=lambda code: (STATUS_OF[code], code))


Contract = dict[str, Operation]


def _one(method: str, operation: Callable[P, Operation]) -> Callable[P, Contract]:
    """A contract of one method, from Operation's arguments: `get(...) | delete(...)` for two."""

    def contract(*args: P.args, **kwargs: P.kwargs) -> Contract:
        return {method: operation(*args, **kwargs)}

    return contract


get, post, delete = _one("GET", Operation), _one("POST", Operation), _one("DELETE", Operation)


def answers(data: dict[str, Any]) -> dict[str, Any]:
    """A success body: `{"data": …}`."""
    return obj({"data": data})


def listing(name: str, item: dict[str, Any], **about: dict[str, Any]) -> dict[str, Any]:
    """A page of a list: `{"data": {**about, name: [item, ...], "next_cursor"}}`."""
    return answers(obj({**about, name: array(item), "next_cursor": nullable(STRING)}))


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
    """A named schema of the document's components."""
    return {"$ref": f"#/components/schemas/{name}"}


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


def fields_of(
    shown: type, *, leave: tuple[str, ...] = (), **given: dict[str, Any]
) -> dict[str, Any]:
    """The schemas of a dataclass's fields, in its order, by their types unless given (a datetime
    is answered as an INSTANT): an answer drawn from the dataclass names its fields once."""
    types = get_type_hints(shown)
    return {
        declared.name: given.get(declared.name) or _schema_of(types[declared.name])
        for declared in fields(shown)
        if declared.name not in leave
    }


def _schema_of(kind: Any) -> dict[str, Any]:
    if type(None) in get_args(kind):  # `X | None`
        return nullable(_schema_of(next(k for k in get_args(kind) if k is not type(None))))
    return {str: STRING, int: INTEGER, bool: BOOLEAN, datetime: INSTANT}[kind]


STRING: dict[str, Any] = {"type": "string"}
INTEGER: dict[str, Any] = {"type": "integer"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
OPEN: dict[str, Any] = {"type": "object", "additionalProperties": True}
INSTANT: dict[str, Any] = {"type": "string", "format": "date-time"}
"""An instant as `titen.domain.clock.iso` writes it: UTC, milliseconds, `Z`."""
