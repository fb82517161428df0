"""Validating a JSON value against one of titen.api.schemas, in REST's words.

One validator for every edge that takes these values (the REST routes and the MCP tools), so a
value is refused for the same reason, in the same words, wherever it arrives. fastjsonschema
compiles each schema to plain Python and decides in microseconds that a value fits; only a value
it refuses goes through jsonschema, whose errors name the field in REST's words. Patterns are
left out of the compiled code and checked by `_fits` with the same rules as `_pattern`, so both
paths accept exactly the same values (tests/unit/test_validation.py holds them to it, and checks
each schema is valid Draft 2020-12). jsonschema is imported when a value is first refused: its
import costs every starting server CPU for words most of them never say.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any, cast

import fastjsonschema

from titen.api.schemas import IDENTIFIER
from titen.domain import identifiers

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""json.loads pairs escaped surrogates into one character, so any left is alone."""


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    """`pattern`, matched against the whole string, and for identifiers every identifier rule.

    The published patterns are anchored (`^...$`), but Python's `$` also matches before a
    final newline, so a search let "id\\n" through; a full match does not. What no portable
    pattern can say (NFC, format characters beyond the BMP) is titen.domain.identifiers'.
    """
    from jsonschema.exceptions import ValidationError

    if not isinstance(instance, str):
        return
    reason = _pattern_problem(pattern, instance, schema)
    if reason is not None:
        yield ValidationError(reason)


def _pattern_problem(pattern: str, instance: str, schema: dict[str, Any]) -> str | None:
    if pattern == IDENTIFIER:
        return identifiers.problem(instance, schema.get("maxLength", len(instance)))
    return None if re.fullmatch(pattern, instance) else identifiers.CONTROL


@cache
def _worded() -> Any:
    """Draft 2020-12's validator class with titen's `pattern`: made once, when first needed."""
    from jsonschema import Draft202012Validator, validators

    return validators.extend(Draft202012Validator, {"pattern": _pattern})


@dataclass(frozen=True)
class Checker:
    """One schema, compiled for both paths: `fits` (fast, yes or no) and `explain` (words)."""

    schema: dict[str, Any]
    """The schema checked, as titen.api.schemas wrote it."""
    fits: Any
    patterned: tuple[tuple[str, str, dict[str, Any]], ...]
    """(property, pattern, its schema) for every top-level string property with a pattern."""

    @cached_property
    def explain(self) -> Validator:
        """jsonschema's validator of the schema, made when a value is first refused."""
        return cast("Validator", _worded()(self.schema))


def validator(schema: dict[str, Any]) -> Checker:
    """A checker for one of titen.api.schemas."""
    properties = schema.get("properties", {})
    if any("pattern" in nested for nested in _nested_schemas(properties)):
        raise ValueError("patterns are checked on top-level properties only")
    patterned = tuple(
        (name, prop["pattern"], prop) for name, prop in properties.items() if "pattern" in prop
    )
    return Checker(
        schema=schema,
        fits=fastjsonschema.compile(
            _without_patterns(schema),
            use_default=False,  # never fill in defaults: a check must not change the value
            use_formats=False,  # formats are annotations only, as for jsonschema
            detailed_exceptions=False,
        ),
        patterned=patterned,
    )


def _without_patterns(schema: dict[str, Any]) -> dict[str, Any]:
    properties = {
        name: {rule: value for rule, value in prop.items() if rule != "pattern"}
        for name, prop in schema.get("properties", {}).items()
    }
    return {**schema, "properties": properties} if properties else schema


def _nested_schemas(properties: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every schema below the top-level properties (array items, nested objects)."""
    for prop in properties.values():
        for rule in ("items", "properties"):
            below = prop.get(rule)
            if isinstance(below, dict):
                children = below.values() if rule == "properties" else [below]
                for child in children:
                    yield child
                    yield from _nested_schemas(child.get("properties", {}))


def _fits(value: Any, checker: Checker) -> bool:
    """Whether the value fits, decided without building a single error."""
    try:
        checker.fits(value)
    except fastjsonschema.JsonSchemaValueException:
        return False
    for name, pattern, schema in checker.patterned:
        text = value.get(name)
        if text is not None and _pattern_problem(pattern, text, schema) is not None:
            return False
    return lone_surrogate(value) is None


def refusal(value: Any, checker: Checker) -> str | None:
    """Why `value` does not fit the checker's schema, as REST says it, or None when it fits."""
    if _fits(value, checker):
        return None
    from jsonschema.exceptions import best_match

    problem = best_match(checker.explain.iter_errors(value))
    if problem is not None:
        return describe(problem)
    field = lone_surrogate(value)
    if field is not None:
        return f"{field} must not contain control characters."  # as the pattern says
    return None


def lone_surrogate(value: Any, path: str = "") -> str | None:
    """The dotted name of the first string holding a lone surrogate, or None.

    Such a string is valid JSON but cannot be encoded as UTF-8, so it could never be stored.
    """
    if isinstance(value, str):
        return path if LONE_SURROGATE.search(value) else None
    items: Iterable[tuple[Any, Any]]
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


ECHO_LIMIT = 100
"""Characters of a client's own text echoed in an error, at most (a name may be huge)."""


def cut(text: str) -> str:
    """`text` as an error may echo it: at most ECHO_LIMIT characters, marked when cut."""
    return text if len(text) <= ECHO_LIMIT else text[:ECHO_LIMIT] + "…"


def describe(problem: ValidationError) -> str:
    """A message that names the field, without echoing the (possibly huge) value."""
    field = ".".join(str(part) for part in problem.absolute_path)
    # Typed loosely by the library (Unset, bool); an error the validator raised has both.
    rule, value, schema = (
        problem.validator,
        cast(Any, problem.validator_value),
        cast(Any, problem.schema),
    )
    if not field and rule == "type":
        return "The request body must be a JSON object."
    if rule == "required":
        return f"Missing field: {cut(problem.message.split(chr(39))[1])}."
    if rule == "additionalProperties":
        unknown = sorted(set(cast(Any, problem.instance)) - set(schema.get("properties", {})))
        return f"Unknown field: {cut(', '.join(unknown))}."
    if rule == "type":
        return f"{field} must be of type {value}."
    if rule in ("minimum", "maximum"):
        return f"{field} must be from {schema['minimum']} to {schema['maximum']}."
    if rule == "minLength":
        return f"{field} must not be empty."
    if rule == "maxLength":
        return f"{field} must be at most {value} characters."
    if rule == "pattern":
        return f"{field} {problem.message}."
    if rule == "enum":
        return f"{field} must be one of: {', '.join(map(str, value))}."
    return f"{cut(field)}: {cut(problem.message)}"
