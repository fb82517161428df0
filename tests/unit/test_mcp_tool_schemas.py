"""The MCP tools' published schemas say what the server enforces: unknown arguments refused, no
default the property's own schema refuses, and a fixed set of answers as an enum."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from titen.api.mcp_tools import CHECKERS, build
from titen.api.validation import refusal
from titen.domain.statuses import PENDING


def listed() -> dict[str, Any]:
    tools = asyncio.run(build(lambda ctx: None).list_tools())
    return {tool.name: tool for tool in tools}


TOOLS = listed()
ARGUMENTS = {
    "titen_lease_acquire": {
        "resource_type": "deploy",
        "resource_id": "checkout",
        "purpose": "smoke",
        "ttl_seconds": 60,
    },
    "titen_handoff": {"to_principal": "agent_bob", "subject_id": "user_rama"},
}


def test_both_input_schemas_refuse_unknown_arguments_as_the_server_does():
    assert set(TOOLS) == set(CHECKERS) == set(ARGUMENTS)
    for name, tool in TOOLS.items():
        assert tool.input_schema["additionalProperties"] is False
        unknown = {**ARGUMENTS[name], "holder": "me"}
        assert not Draft202012Validator(tool.input_schema).is_valid(unknown)
        assert refusal(unknown, CHECKERS[name]) == "Unknown field: holder."


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_no_property_has_a_default_its_own_schema_refuses(name):
    for field, schema in TOOLS[name].input_schema["properties"].items():
        if "default" in schema:
            assert Draft202012Validator(schema).is_valid(schema["default"]), field


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_what_the_schema_accepts_the_server_accepts(name):
    schema = TOOLS[name].input_schema
    Draft202012Validator.check_schema(schema)
    assert Draft202012Validator(schema).is_valid(ARGUMENTS[name])
    assert refusal(ARGUMENTS[name], CHECKERS[name]) is None


def test_the_handoff_message_is_optional_without_a_default_and_null_is_refused_by_both():
    schema = TOOLS["titen_handoff"].input_schema
    message = schema["properties"]["message"]
    assert "message" not in schema["required"] and "default" not in message
    with_null = {**ARGUMENTS["titen_handoff"], "message": None}
    assert not Draft202012Validator(schema).is_valid(with_null)
    assert refusal(with_null, CHECKERS["titen_handoff"]) == "message must be of type string."


def test_the_handoffs_status_is_an_enum():
    status = TOOLS["titen_handoff"].output_schema["properties"]["status"]
    assert status["enum"] == [PENDING]
