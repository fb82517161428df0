"""Reading a JSON request body: size, media type, syntax, then its JSON Schema."""

from __future__ import annotations

import json
import re
from typing import Any

import falcon
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from titen.api.rest.errors import error

MAX_BODY_BYTES = 1024 * 1024
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""json.loads pairs escaped surrogates into one character, so any left is alone."""


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    """A validator for one of titen.api.schemas (checked once, at import)."""
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


class BodyLimit:
    """Falcon middleware: refuse any declared body over the limit before routing."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.content_length is not None and req.content_length > MAX_BODY_BYTES:
            raise error(413)


def read_json(req: falcon.Request, validator: Draft202012Validator) -> dict[str, Any]:
    raw = req.bounded_stream.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise error(413)
    if not req.content_type or req.content_type.split(";")[0].strip().lower() != (
        falcon.MEDIA_JSON
    ):
        raise error(415)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(400, f"The request body is not valid JSON: {exc}.") from None
    problem = best_match(validator.iter_errors(body))
    if problem is not None:
        raise error(400, describe(problem))
    field = lone_surrogate(body)
    if field is not None:
        raise error(400, f"{field} must not contain control characters.")  # as the pattern says
    return body


def lone_surrogate(value: Any, path: str = "") -> str | None:
    """The dotted name of the first string holding a lone surrogate, or None.

    Such a string is valid JSON but cannot be encoded as UTF-8, so it could never be stored.
    """
    if isinstance(value, str):
        return path if LONE_SURROGATE.search(value) else None
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for name, item in items:
        found = lone_surrogate(item, f"{path}.{name}" if path else str(name))
        if found is not None:
            return found
    return None


def describe(problem: ValidationError) -> str:
    """A message that names the field, without echoing the (possibly huge) value."""
    field = ".".join(str(part) for part in problem.absolute_path)
    rule, value, schema = problem.validator, problem.validator_value, problem.schema
    if not field and rule == "type":
        return "The request body must be a JSON object."
    if rule == "required":
        return f"Missing field: {problem.message.split(chr(39))[1]}."
    if rule == "additionalProperties":
        unknown = sorted(set(problem.instance) - set(schema.get("properties", {})))
        return f"Unknown field: {', '.join(unknown)}."
    if rule == "type":
        return f"{field} must be of type {value}."
    if rule in ("minimum", "maximum"):
        return f"{field} must be from {schema['minimum']} to {schema['maximum']}."
    if rule == "minLength":
        return f"{field} must not be empty."
    if rule == "maxLength":
        return f"{field} must be at most {value} characters."
    if rule == "pattern":
        return f"{field} must not contain control characters."
    if rule == "enum":
        return f"{field} must be one of: {', '.join(map(str, value))}."
    return f"{field}: {problem.message}"
