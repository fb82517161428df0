"""The fast path (fastjsonschema) and the worded path (jsonschema) accept exactly the same values.

`refusal` trusts the fast path's yes; if it ever said yes where jsonschema's rules say no, a bad
body would reach a command. Hypothesis searches for such a value among near-valid bodies.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from titen.api import schemas
from titen.api.validation import Checker, _fits, lone_surrogate, refusal, validator

SCHEMAS = {
    "acquire": schemas.ACQUIRE,
    "create_handoff": schemas.CREATE_HANDOFF,
    "resolve_handoff": schemas.RESOLVE_HANDOFF,
    "create_webhook": schemas.CREATE_WEBHOOK,
}
CHECKERS = {name: validator(schema) for name, schema in SCHEMAS.items()}
VALID = {
    "acquire": {"resource_type": "repo", "resource_id": "r1", "purpose": "p", "ttl_seconds": 60},
    "create_handoff": {"to_principal": "agent_b", "subject_id": "s1", "message": "m"},
    "resolve_handoff": {"status": "accepted"},
    "create_webhook": {"url": "https://example.com/hook", "types": ["lease.acquired"]},
}

AWKWARD = "ab /\n\r\t\x00\x85\u2028\u200b\ud800é\u0065\u0301"
"""Characters on both sides of the text rules: breaks, controls, format, surrogates, combining."""
awkward_text = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.sampled_from(AWKWARD), max_size=6),
    st.sampled_from(["", " ", "x" * 200, "x" * 201, "accepted", "rejected", "lease.acquired"]),
)
scalars = st.one_of(
    awkward_text, st.integers(-10, 90000), st.booleans(), st.none(), st.floats(0, 100)
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=4)


def bodies(name: str) -> st.SearchStrategy[Any]:
    """A valid body with up to two fields changed, dropped or added; or anything at all.

    Most draws sit next to a valid body, where a lax fast path would be caught.
    """
    names = st.sampled_from([*SCHEMAS[name]["properties"], "unknown"])
    changes = st.dictionaries(names, st.one_of(values, st.just(DROP)), min_size=1, max_size=2)
    near = changes.map(lambda change: _changed(VALID[name], change))
    return st.one_of(near, st.dictionaries(names, values, max_size=6), values)


DROP = object()


def _changed(body: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    changed = {**body, **change}
    return {field: value for field, value in changed.items() if value is not DROP}


def worded_verdict(value: Any, checker: Checker) -> bool:
    """Whether jsonschema, with titen's pattern rules, finds nothing wrong."""
    return not any(checker.explain.iter_errors(value)) and lone_surrogate(value) is None


@pytest.mark.parametrize("name", SCHEMAS)
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_both_paths_accept_the_same_values(name, data):
    checker = CHECKERS[name]
    value = data.draw(bodies(name))
    assert _fits(value, checker) == worded_verdict(value, checker)


def test_a_refused_value_is_worded_by_the_slow_path():
    checker = CHECKERS["acquire"]
    good = VALID["acquire"]
    assert refusal(good, checker) is None
    assert refusal({**good, "ttl_seconds": True}, checker) == "ttl_seconds must be of type integer."
    assert refusal({**good, "resource_id": "r1\n"}, checker) is not None
    lone = "purpose must not contain control characters."
    assert refusal({**good, "purpose": "half a pair: \ud800"}, checker) == lone


def test_a_pattern_below_the_top_level_is_refused_at_start_up():
    nested = schemas.body({"list": {"type": "array", "items": schemas.text(5)}}, required=[])
    with pytest.raises(ValueError, match="top-level"):
        validator(nested)


def every_checker() -> dict[str, Checker]:
    """Each checker the edges validate with (REST's routes and MCP's tools), by name."""
    from titen.api import mcp_tools
    from titen.api.rest import audit, handoffs, leases, webhooks

    found = {
        f"{module.__name__}.{name}": value
        for module in (audit, handoffs, leases, webhooks)
        for name, value in vars(module).items()
        if isinstance(value, Checker)
    }
    found.update({f"mcp {name}": value for name, value in mcp_tools.CHECKERS.items()})
    return found


def test_every_schema_an_edge_checks_with_is_a_valid_draft_2020_12_schema():
    from jsonschema import Draft202012Validator

    checkers = every_checker()
    assert len(checkers) >= 8, sorted(checkers)
    for checker in checkers.values():
        Draft202012Validator.check_schema(checker.schema)


def test_a_server_loads_jsonschema_only_once_a_value_is_refused():
    """Its import is 80 ms of CPU in each server that starts (api/validation.py)."""
    code = (
        "import sys\n"
        "from titen.api.rest.app import create_app\n"
        "from titen.api.rest.leases import ACQUIRE\n"
        "from titen.api.validation import refusal\n"
        "assert 'jsonschema' not in sys.modules\n"
        "assert refusal({}, ACQUIRE) == 'Missing field: resource_type.'\n"
        "assert 'jsonschema' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
