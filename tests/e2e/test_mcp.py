"""`titen mcp` driven by the MCP SDK's own client, against a real `titen serve` (SQLite)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from tests.support import TITEN, Server, create_key, free_port
from titen.api.rest.handoffs import CREATE
from titen.api.rest.leases import ACQUIRE
from titen.client import TitenClient

CLIENTS = Path(__file__).parents[2] / "docs" / "clients.md"
LEASE = {"resource_type": "deploy", "purpose": "run rollback smoke", "ttl_seconds": 600}


@dataclass
class World:
    url: str
    keys: dict[str, str]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    database = f"sqlite:///{tmp_path_factory.mktemp('mcp')}/titen.db"
    keys = {name: create_key(database, "acme", name) for name in ("agent_alice", "agent_bob")}
    server = Server(database)
    yield World(server.url, keys)
    server.stop()


@asynccontextmanager
async def mcp_session(
    url: str | None,
    key: str | None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    errlog: Path | None = None,
) -> AsyncIterator[ClientSession]:
    """A `titen mcp` subprocess, initialized; it gets only the environment given here, and
    writes its stderr to `errlog` (default: nowhere)."""
    env = {**({} if key is None else {"TITEN_API_KEY": key}), **(env or {})}
    args = ["mcp"] if url is None else ["mcp", "--url", url]
    params = StdioServerParameters(command=TITEN, args=args, env=env, cwd=cwd)
    with open(errlog or os.devnull, "w") as log:
        async with (
            stdio_client(params, errlog=log) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with anyio.fail_after(60):
            await scenario()

    anyio.run(bounded)


def text(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def still_answers(session: ClientSession) -> None:
    """The process survived whatever came before: it lists its tools again."""
    names = {tool.name for tool in (await session.list_tools()).tools}
    assert names == {"titen_lease_acquire", "titen_handoff"}


def test_exactly_two_tools_whose_schemas_carry_the_rest_bounds(world):
    async def scenario() -> None:
        async with mcp_session(world.url, world.keys["agent_alice"]) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(tools) == {"titen_lease_acquire", "titen_handoff"}
            lease, handoff = tools["titen_lease_acquire"], tools["titen_handoff"]

            expected = {
                "titen_lease_acquire": (ACQUIRE.schema["properties"], ACQUIRE.schema["required"]),
                "titen_handoff": (
                    {k: CREATE.schema["properties"][k] for k in ("to_principal", "subject_id")}
                    | {"message": CREATE.schema["properties"]["message"]},
                    ["to_principal", "subject_id"],
                ),
            }
            for name, (properties, required) in expected.items():
                schema = tools[name].input_schema
                assert sorted(schema["required"]) == sorted(required)
                assert set(schema["properties"]) == set(properties)
                for field, rest in properties.items():
                    published = schema["properties"][field]
                    assert {k: published[k] for k in rest} == rest, field
                    assert len(published["description"]) > 10, field
            ttl = lease.input_schema["properties"]["ttl_seconds"]
            assert (ttl["type"], ttl["minimum"], ttl["maximum"]) == ("integer", 10, 86400)
            assert handoff.input_schema["properties"]["message"]["maxLength"] == 4000

            for phrase in ("advisory", "until", "supersedes", "new lease_id", "expires_at"):
                assert phrase in lease.description, phrase
            for phrase in ("pending", "to_principal", "subject_id"):
                assert phrase in handoff.description, phrase
            assert set(lease.output_schema["required"]) == {
                "lease_id",
                "expires_at",
                "fencing_token",
            }
            assert set(handoff.output_schema["required"]) == {"handoff_id", "status"}

    run(scenario)


def test_acquire_conflict_and_bad_arguments_come_back_as_tool_errors(world):
    async def scenario() -> None:
        alice_key, bob_key = world.keys["agent_alice"], world.keys["agent_bob"]
        async with (
            mcp_session(world.url, alice_key) as alice,
            mcp_session(world.url, bob_key) as bob,
        ):
            acquire = {**LEASE, "resource_id": "checkout-service"}
            held = await alice.call_tool("titen_lease_acquire", acquire)
            assert not held.is_error, text(held)
            data = held.structured_content
            assert set(data) == {"lease_id", "expires_at", "fencing_token"}
            assert data["fencing_token"] == 1
            assert re.fullmatch(r"lease_[0-9a-f]{32}", data["lease_id"])
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", data["expires_at"])

            conflict = await bob.call_tool("titen_lease_acquire", acquire)
            assert conflict.is_error
            assert text(conflict) == (
                f"Resource is leased by another principal until {data['expires_at']}."
            )
            await still_answers(bob)

            again = await alice.call_tool("titen_lease_acquire", acquire)
            assert again.structured_content["lease_id"] != data["lease_id"]  # superseded
            assert again.structured_content["fencing_token"] == 2

            too_short = await alice.call_tool("titen_lease_acquire", {**acquire, "ttl_seconds": 5})
            assert too_short.is_error
            assert "ttl_seconds must be from 10 to 86400." in text(too_short)
            await still_answers(alice)

            too_long = {**acquire, "resource_id": "x" * 201}
            refused = await alice.call_tool("titen_lease_acquire", too_long)
            assert refused.is_error
            assert "resource_id must be at most 200 characters." in text(refused)

            missing = {k: v for k, v in acquire.items() if k != "purpose"}
            incomplete = await alice.call_tool("titen_lease_acquire", missing)
            assert incomplete.is_error and "purpose" in text(incomplete)
            await still_answers(alice)

            other = await alice.call_tool("titen_lease_acquire", {**acquire, "resource_id": "b"})
            assert not other.is_error

    run(scenario)


def test_a_handoff_is_sent_and_its_refusals_are_tool_errors(world):
    async def scenario() -> None:
        async with mcp_session(world.url, world.keys["agent_alice"]) as alice:
            arguments = {
                "to_principal": "agent_bob",
                "subject_id": "user_rama",
                "message": "Smoke passed, needs approval to promote.",
            }
            sent = await alice.call_tool("titen_handoff", arguments)
            assert not sent.is_error, text(sent)
            assert sent.structured_content["status"] == "pending"
            handoff_id = sent.structured_content["handoff_id"]
            assert re.fullmatch(r"hoff_[0-9a-f]{32}", handoff_id)
            with TitenClient(world.url, world.keys["agent_bob"]) as bob:
                received = bob.get_handoff(handoff_id)
            assert (received.from_principal, received.message) == (
                "agent_alice",
                arguments["message"],
            )

            bare = await alice.call_tool(
                "titen_handoff", {"to_principal": "agent_bob", "subject_id": "user_rama"}
            )
            assert not bare.is_error, text(bare)

            for target in ("agent_nobody", "agent_alice"):
                refused = await alice.call_tool(
                    "titen_handoff", {**arguments, "to_principal": target}
                )
                assert refused.is_error and "to_principal" in text(refused), text(refused)
                await still_answers(alice)

            long = await alice.call_tool("titen_handoff", {**arguments, "message": "m" * 4001})
            assert long.is_error and "message must be at most 4000 characters." in text(long)
            await still_answers(alice)

    run(scenario)


def test_a_wrong_key_is_a_tool_error_and_the_server_keeps_answering(world):
    async def scenario() -> None:
        async with mcp_session(world.url, "titen_" + "0" * 48) as stranger:
            for _ in range(2):
                refused = await stranger.call_tool(
                    "titen_lease_acquire", {**LEASE, "resource_id": "checkout-service"}
                )
                assert refused.is_error
                assert "A valid API key is required" in text(refused)
                await still_answers(stranger)

    run(scenario)


def test_tool_errors_are_the_services_words_alone_and_nothing_is_logged(world, tmp_path):
    """What docs/clients.md promises an MCP client shows, and a quiet stderr (the host's log)."""
    errlog = tmp_path / "stderr"
    section = " ".join(
        CLIENTS.read_text().split("## The MCP server", 1)[1].split("\n## ", 1)[0].split()
    )
    promised = re.search(
        r"such as `(Resource is leased by another principal until [^`]+)`", section
    )
    assert promised, "docs/clients.md no longer shows what a tool error reads"

    async def scenario() -> None:
        alice_key, bob_key = world.keys["agent_alice"], world.keys["agent_bob"]
        async with (
            mcp_session(world.url, alice_key, errlog=errlog) as alice,
            mcp_session(world.url, bob_key, errlog=errlog) as bob,
        ):
            acquire = {**LEASE, "resource_id": "quiet"}
            held = await alice.call_tool("titen_lease_acquire", acquire)
            assert not held.is_error, text(held)
            conflict = await bob.call_tool("titen_lease_acquire", acquire)
            assert conflict.is_error
            expires_at = held.structured_content["expires_at"]
            shown = promised.group(1).replace("2026-07-30T10:58:13.829Z", expires_at)
            assert text(conflict) == shown
            refused = await bob.call_tool("titen_handoff", {"to_principal": "agent_bob"})
            assert refused.is_error and text(refused) == "Missing field: subject_id."
            unknown = await bob.call_tool("titen_handoff", {**acquire})
            assert unknown.is_error
            await still_answers(bob)

    run(scenario)
    assert errlog.read_text() == ""


def test_an_unreachable_service_is_a_tool_error_and_the_server_keeps_answering():
    url = f"http://127.0.0.1:{free_port()}"

    async def scenario() -> None:
        async with mcp_session(url, "titen_any") as lost:
            acquired = await lost.call_tool(
                "titen_lease_acquire", {**LEASE, "resource_id": "checkout-service"}
            )
            assert acquired.is_error
            assert f"Titen is unreachable at {url}" in text(acquired)
            await still_answers(lost)
            sent = await lost.call_tool("titen_handoff", {"to_principal": "a", "subject_id": "b"})
            assert sent.is_error and "unreachable" in text(sent)
            await still_answers(lost)

    run(scenario)


def test_it_needs_only_a_url_and_a_key_and_writes_no_database(world, tmp_path):
    """Run from an empty directory with no database settings: nothing appears there."""

    async def scenario() -> None:
        async with mcp_session(world.url, world.keys["agent_alice"], cwd=tmp_path) as alice:
            result = await alice.call_tool(
                "titen_lease_acquire", {**LEASE, "resource_id": "no-database"}
            )
            assert not result.is_error, text(result)

    run(scenario)
    assert list(tmp_path.iterdir()) == []


def test_titen_url_from_the_environment_is_used_without_url(world):
    async def scenario() -> None:
        env = {"TITEN_URL": world.url}
        async with mcp_session(None, world.keys["agent_bob"], env=env) as bob:
            result = await bob.call_tool("titen_lease_acquire", {**LEASE, "resource_id": "env"})
            assert not result.is_error, text(result)

    run(scenario)


@pytest.mark.parametrize(
    ("env", "args", "complaint"),
    [
        ({}, [], "TITEN_API_KEY is not set"),
        ({"TITEN_API_KEY": "titen_any"}, ["--url", "127.0.0.1:8787"], "must start with http"),
    ],
)
def test_a_missing_key_or_a_bad_url_stops_it_at_start(env, args, complaint):
    result = subprocess.run(
        [TITEN, "mcp", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert complaint in result.stderr


def test_the_documented_host_configuration_works_after_the_install(world, tmp_path):
    """The host runs `command` from elsewhere with only the configured environment (no PATH):
    the documented absolute path, as `realpath .venv/bin/titen` prints it in the checkout."""
    section = CLIENTS.read_text().split("## The MCP server", 1)[1].split("\n## ", 1)[0]
    assert "`realpath .venv/bin/titen`" in section and "`pipx install .`" in section
    [block] = re.findall(r"```json\n(.*?)```", section, re.DOTALL)
    entry: dict[str, Any] = json.loads(block)["mcpServers"]["titen"]
    assert entry["command"].startswith("/") and entry["command"].endswith("/.venv/bin/titen")
    assert entry["args"] == ["mcp", "--url", "http://127.0.0.1:8787"]
    assert set(entry["env"]) == {"TITEN_API_KEY"}
    command = subprocess.run(
        ["realpath", ".venv/bin/titen"], cwd=CLIENTS.parents[1], capture_output=True, text=True
    ).stdout.strip()
    assert Path(command).samefile(TITEN)
    args = [world.url if arg == "http://127.0.0.1:8787" else arg for arg in entry["args"]]
    params = StdioServerParameters(
        command=command, args=args, env={"TITEN_API_KEY": world.keys["agent_alice"]}, cwd=tmp_path
    )

    async def scenario() -> None:
        with open(os.devnull, "w") as log:
            async with (
                stdio_client(params, errlog=log) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                result = await session.call_tool(
                    "titen_lease_acquire", {**LEASE, "resource_id": "readme"}
                )
                assert not result.is_error, text(result)

    run(scenario)


def test_arguments_are_checked_as_rest_checks_them_in_rests_words(world):
    """No coercion ("600", true), no null for an optional string, REST's messages, not
    pydantic's; and identifiers follow the same rules (docs/identifiers.md)."""
    acquire = {**LEASE, "resource_id": "strict-1"}
    lease, handoff = "titen_lease_acquire", "titen_handoff"
    sent = {"to_principal": "agent_bob", "subject_id": "s"}
    not_integer = "ttl_seconds must be of type integer."
    refusals = [
        (lease, {**acquire, "ttl_seconds": "600"}, not_integer),
        (lease, {**acquire, "ttl_seconds": True}, not_integer),
        (lease, {**acquire, "ttl_seconds": 60.5}, not_integer),
        (lease, {**acquire, "resource_id": 7}, "resource_id must be of type string."),
        (
            lease,
            {**acquire, "resource_id": "cafe\u0301"},
            "resource_id must be in Unicode normalization form C (NFC).",
        ),
        (
            lease,
            {**acquire, "resource_id": "a\u200bb"},
            "resource_id must not contain invisible format characters (Unicode Cf).",
        ),
        (
            lease,
            {**acquire, "resource_id": "x\n"},
            "resource_id must not contain control characters.",
        ),
        (lease, {**acquire, "holder": "me"}, "Unknown field: holder."),
        (lease, {k: v for k, v in acquire.items() if k != "purpose"}, "Missing field: purpose."),
        (handoff, {**sent, "message": None}, "message must be of type string."),
        (handoff, {**sent, "subject_id": "   "}, "subject_id must not be only whitespace."),
        (handoff, {**sent, "context_id": "c"}, "Unknown field: context_id."),
    ]

    async def scenario() -> None:
        async with mcp_session(world.url, world.keys["agent_alice"]) as alice:
            for tool, arguments, message in refusals:
                refused = await alice.call_tool(tool, arguments)
                assert refused.is_error and text(refused) == message, (arguments, text(refused))
            await still_answers(alice)
            emoji = await alice.call_tool("titen_lease_acquire", {**acquire, "resource_id": "🚀"})
            assert not emoji.is_error, text(emoji)
            literal = {"to_principal": "agent_bob", "subject_id": "null", "message": "[1, 2]"}
            sent = await alice.call_tool("titen_handoff", literal)  # strings stay strings
            assert not sent.is_error, text(sent)
            with TitenClient(world.url, world.keys["agent_bob"]) as bob:
                received = bob.get_handoff(sent.structured_content["handoff_id"])
            assert (received.subject_id, received.message) == ("null", "[1, 2]")

    run(scenario)


NODE = shutil.which("node")
CHECK_IN_JAVASCRIPT = """
const [schemas, samples] = JSON.parse(require("fs").readFileSync(0, "utf8"));
const answers = [];
for (const schema of schemas) {
  for (const [name, field] of Object.entries(schema.properties)) {
    if (!field.pattern) continue;
    for (const flags of ["", "u"]) {
      const re = new RegExp(field.pattern, flags);
      answers.push([name, flags, samples.map((sample) => re.test(sample))]);
    }
  }
}
console.log(JSON.stringify(answers));
"""


@pytest.mark.skipif(NODE is None, reason="no node to run JavaScript")
def test_the_tools_schemas_work_in_javascript_with_and_without_the_u_flag(world):
    samples = ["🚀 launch", "café", "checkout-service", "a\u200bb", "   ", "a\u2028b"]
    accepted = [True, True, True, False, False, False]

    schemas: list[Any] = []

    async def scenario() -> None:
        async with mcp_session(world.url, world.keys["agent_alice"]) as session:
            schemas.extend(tool.input_schema for tool in (await session.list_tools()).tools)

    run(scenario)
    done = subprocess.run(
        [NODE, "-e", CHECK_IN_JAVASCRIPT],
        input=json.dumps([schemas, samples]),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    answers = json.loads(done.stdout)
    identifiers = [a for a in answers if a[0] in ("resource_id", "to_principal", "subject_id")]
    assert len(identifiers) == 6  # three identifier fields, each with and without `u`
    for name, flags, matched in identifiers:
        assert matched == accepted, (name, flags)
    for name, flags, matched in answers:
        assert matched[0], (name, flags)  # emoji pass every text pattern
