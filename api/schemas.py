"""The JSON Schemas of the request bodies: one source for the REST validation and the MCP tools.

Plain dictionaries built from the domain's bounds, with no validator library, so the MCP server
(which publishes them as its tools' parameter schemas) loads none of the server's code.
"""

from __future__ import annotations

from typing import Any

from titen.domain.identifiers import PATTERN as IDENTIFIER
from titen.domain.limits import (
    MAX_TTL_SECONDS,
    MESSAGE_LENGTH,
    MIN_TTL_SECONDS,
    NAME_LENGTH,
    PURPOSE_LENGTH,
)
from titen.domain.published import PUBLISHED
from titen.domain.statuses import ACCEPTED, REJECTED
from titen.domain.webhooks import URL_LENGTH

# Stored text must survive both backends and the event store's UTF-8 encoding: no NUL or other
# control characters (C0 and C1; free text may also hold tabs and line breaks, single-line text
# no line or paragraph separator either), and no lone surrogates
# (JSON can carry "\ud800", UTF-8 cannot), which the REST edge refuses in any body
# (api/rest/body.py): a surrogate range in a published pattern is not portable (ECMA-262 and
# the tools that generate data from these schemas cannot use it). Anything else would be saved
# as an event that a projection then cannot apply, so it is refused before any command runs.
# Identifiers (IDENTIFIER) follow titen.domain.identifiers, which says what a pattern cannot.
SINGLE_LINE = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]*$"
MULTI_LINE = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*$"


def text(max_length: int, *, multiline: bool = False) -> dict[str, Any]:
    """Schema for a non-empty string field of safe text."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": max_length,
        "pattern": MULTI_LINE if multiline else SINGLE_LINE,
    }


def identifier() -> dict[str, Any]:
    """Schema for a name a client chooses: titen.domain.identifiers' rules."""
    return {"type": "string", "minLength": 1, "maxLength": NAME_LENGTH, "pattern": IDENTIFIER}


def body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """Schema for a JSON object with exactly these fields."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


ACQUIRE = body(
    {
        "resource_type": identifier(),
        "resource_id": identifier(),
        "purpose": text(PURPOSE_LENGTH, multiline=True),
        "ttl_seconds": {"type": "integer", "minimum": MIN_TTL_SECONDS, "maximum": MAX_TTL_SECONDS},
    },
    required=["resource_type", "resource_id", "purpose", "ttl_seconds"],
)
CREATE_HANDOFF = body(
    {
        "to_principal": identifier(),
        "subject_id": identifier(),
        "context_id": identifier(),
        "checkpoint_id": identifier(),
        "message": text(MESSAGE_LENGTH, multiline=True),
    },
    required=["to_principal", "subject_id"],
)
RESOLVE_HANDOFF = body(
    {"status": {"type": "string", "enum": [ACCEPTED, REJECTED]}}, required=["status"]
)
CREATE_WEBHOOK = body(
    {
        "url": text(URL_LENGTH),
        "types": {
            "type": "array",
            "items": {"type": "string", "enum": list(PUBLISHED)},
            "minItems": 1,
            "maxItems": 32,
        },
        "to_principal": identifier(),
    },
    required=["url"],
)
