"""JSON a client sends (a body, a cursor, an MCP message) nested too deep is refused from its
text, before the JSON parser sees it (domain/json_depth.py). The parser recursed once per level,
up to the interpreter's recursion limit: whatever the garbage collector ran down there (an
object's finalizer, a callback) failed for want of stack, was reported as "Exception ignored",
and failed a CI run."""

from __future__ import annotations

import base64
import gc
import sys
from collections.abc import Callable

import falcon
import pytest

from titen.api.rest.body import MAX_DEPTH, parse_json
from titen.api.rest.mcp import _message
from titen.domain.cursors import Cursors
from titen.domain.json_depth import STRING, nests_deeper


def refusal(text: str) -> str:
    with pytest.raises(falcon.HTTPError) as raised:
        parse_json(text.encode(), "The body")
    return str(raised.value.description)


def nested(levels: int) -> Callable[[], int]:
    """A function that calls itself `levels` deep: it needs that much stack wherever it runs."""

    def call(depth: int = levels) -> int:
        return depth if depth == 0 else call(depth - 1)

    return call


@pytest.fixture
def collector_at_every_level(monkeypatch):
    """The garbage collector runs at (nearly) every allocation, and each run calls a function
    that needs 20 frames of stack; the test fails if any run found none (an unraisable
    exception)."""
    gc.collect()  # earlier tests' garbage, collected before this test is the one watched
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    work = nested(20)
    callback = lambda phase, info: work()  # noqa: E731
    threshold = gc.get_threshold()
    gc.callbacks.append(callback)
    gc.set_threshold(1)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(callback)
    assert unraisable == []


DEEP = b"[" * 100_000


def test_a_deep_body_is_refused_with_the_stack_to_spare(collector_at_every_level):
    message = refusal(DEEP.decode())
    assert message == f"The body is nested too deeply: at most {MAX_DEPTH} levels."


def test_a_deep_cursor_is_refused_with_the_stack_to_spare(collector_at_every_level):
    cursors = Cursors(bytes(32), unsealed_until=10)
    assert cursors.open(base64.urlsafe_b64encode(DEEP).decode()) is None


def test_a_deep_mcp_message_is_refused_with_the_stack_to_spare(collector_at_every_level):
    with pytest.raises(falcon.HTTPError) as raised:
        _message(DEEP)
    assert raised.value.description == (
        f"The request body is nested too deeply: at most {MAX_DEPTH} levels."
    )


@pytest.mark.parametrize(
    "text",
    [
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
        '{"a": ' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1),
        '{"a": [' + "{" * MAX_DEPTH,  # never closed: deep before it is broken
    ],
)
def test_one_level_past_the_limit_is_refused(text):
    assert refusal(text) == f"The body is nested too deeply: at most {MAX_DEPTH} levels."


@pytest.mark.parametrize(
    "text",
    [
        "[" * MAX_DEPTH + "]" * MAX_DEPTH,
        '{"a": ' * MAX_DEPTH + "1" + "}" * MAX_DEPTH,
        '["' + "[" * 100 + '", "{\\"' + "{" * 100 + '"]',  # brackets inside strings
        "[" + "[], " * 1000 + "[]]",  # many arrays, two levels
    ],
)
def test_nesting_within_the_limit_is_parsed(text):
    assert parse_json(text.encode(), "The body") is not None


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "utf-16"])
def test_a_body_in_utf_16_or_32_is_measured_as_the_parser_reads_it(encoding):
    """U+2200 holds a quote's byte in UTF-16, U+5B5B two brackets': read as UTF-8 bytes, the
    first hid 5,000 levels inside a "string" and the second made a flat body look deep."""
    deep = '["\u2200", ' + "[" * 5000 + "]" * 5000 + ', "\u2200"]'
    with pytest.raises(falcon.HTTPError) as raised:
        parse_json(deep.encode(encoding), "The body")
    assert raised.value.description == f"The body is nested too deeply: at most {MAX_DEPTH} levels."
    flat = '{"a": "\u2200", "b": "' + "\u5b5b" * 40 + '"}'
    assert parse_json(flat.encode(encoding), "The body") == {"a": "\u2200", "b": "\u5b5b" * 40}


def test_an_unterminated_string_is_one_match_to_the_end():
    """A string that never ends is taken to the text's end at the first try: a pattern that
    had to end in a quote tried again at every quote inside it, a time that grew with the
    square of the text (20 s for 64 KiB of escaped quotes)."""
    text = b'"' + b'\\"' * 10_000 + b"[" * 40
    match = STRING.match(text)
    assert match is not None and match.end() == len(text)
    assert not nests_deeper(b"[" * 10 + text, MAX_DEPTH)  # the parser stops at the string


def test_a_broken_body_within_the_limit_is_not_valid_json():
    assert refusal("[" * 20 + "]" * 20 + "}").startswith("The body is not valid JSON")
