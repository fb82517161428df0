"""`/mcp`: the two tools over Streamable HTTP, through the MCP SDK's own client, on both backends.

Each backend's store is served by two `titen serve` processes: one with `--workers 2`, and a
second server. The SDK client's requests alternate between the two (`Alternating`), so every
session here is opened on one process and used on another: nothing of a session may live in
one process's memory. Raw requests (httpx2) check what the SDK client does not show: the
statuses, headers and envelopes of refusals.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import fastmcp
import httpx2
import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import BACKENDS, skip_or_fail_without_postgres
from tests.e2e.test_mcp import LEASE, mcp_session, run, text
from tests.support import Http, Server, create_key, postgres_schema, titen
from titen.api.rest.errors import DEFAULT_MESSAGES
from titen.api.rest.jsonrpc import NOT_A_MESSAGE

SESSION = "mcp-session-id"
TOOLS = {"titen_lease_acquire", "titen_handoff"}
ANSWER = 30.0
"""A bound for an answer, not a pace: a worker's first /mcp request imports the MCP SDK and
builds its app, which took over httpx's default 5 s on a loaded machine."""
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream"}
WRONG_KEY = DEFAULT_MESSAGES[401]
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"  # .ci/run fetches the same
NPX = shutil.which("npx")


@dataclass
class World:
    database: str
    urls: tuple[str, str]
    """The server with two workers, then the second server of the same store."""
    keys: dict[str, str]
    """acme: agent_alice, agent_bob, agent_dora (revoked by a test); umbrella: agent_carol."""

    @property
    def mcp(self) -> str:
        return self.urls[0] + "/mcp"


@pytest.fixture(scope="module", params=BACKENDS)
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    with _store(request.param, tmp_path_factory) as database:
        keys = {
            name: create_key(database, "acme", name)
            for name in ("agent_alice", "agent_bob", "agent_dora")
        }
        keys["agent_carol"] = create_key(database, "umbrella", "agent_carol")
        servers = [Server(database, 8, "--workers", "2"), Server(database, 8)]
        try:
            yield World(database, (servers[0].url, servers[1].url), keys)
        finally:
            for server in servers:
                server.stop()
        for server in servers:  # whatever a test sent, nothing failed inside
            assert '"status": 500' not in server.log, server.log[-5000:]


@contextmanager
def _store(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('mcp-http')}/titen.db"
        return
    skip_or_fail_without_postgres()
    with postgres_schema() as url:
        yield url


@dataclass
class Alternating(httpx2.AsyncBaseTransport):
    """Sends each request to the next server in turn, and notes the session id each carried."""

    urls: tuple[str, str]
    sent: list[tuple[str, str | None]] = field(default_factory=list)
    """(server, session id sent) of each request, in order."""

    def __post_init__(self) -> None:
        self._next = itertools.cycle(self.urls)
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        server = next(self._next)
        request.url = request.url.copy_with(port=int(server.rsplit(":", 1)[1]))
        self.sent.append((server, request.headers.get(SESSION)))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def session(world: World, key: str) -> AsyncIterator[tuple[ClientSession, Alternating]]:
    """The SDK's handshake client (it keeps the session id it is given), initialized, its
    requests alternating between the two servers."""
    transport = Alternating(world.urls)
    headers = {"authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, transport=transport, timeout=ANSWER) as http,
        streamable_http_client(world.mcp, http_client=http) as (read, write),
        ClientSession(read, write) as opened,
    ):
        await opened.initialize()
        yield opened, transport


def post(world: World, body: Any, key: str | None, **headers: str) -> httpx2.Response:
    sent = {**ACCEPT, **headers}
    if key is not None:
        sent["authorization"] = f"Bearer {key}"
    return httpx2.post(world.mcp, json=body, headers=sent, timeout=ANSWER)


def call(name: str, arguments: dict[str, Any], request_id: int = 2) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def rpc_code(answer: httpx2.Response) -> str:
    """Titen's code in a JSON-RPC error answer (`error.data.code`), once its shape is checked."""
    body = answer.json()
    assert (body["jsonrpc"], body["id"]) == ("2.0", None), body
    return body["error"]["data"]["code"]


def holder(world: World, lease_id: str, key: str) -> str | None:
    status, body = Http(world.urls[1], key).request("GET", f"/v1/leases/{lease_id}")
    return body["data"]["holder"] if status == 200 else None


def test_the_tools_are_exactly_those_of_titen_mcp(world):
    listed: dict[str, list[dict[str, Any]]] = {}

    async def scenario() -> None:
        async with mcp_session(world.urls[0], world.keys["agent_alice"]) as stdio:
            listed["stdio"] = [t.model_dump() for t in (await stdio.list_tools()).tools]
        async with session(world, world.keys["agent_alice"]) as (http, _):
            listed["http"] = [t.model_dump() for t in (await http.list_tools()).tools]

    run(scenario)
    assert {tool["name"] for tool in listed["http"]} == TOOLS
    assert listed["http"] == listed["stdio"]


def test_a_session_acquires_and_is_told_of_a_conflict_on_any_process(world):
    resource = {**LEASE, "resource_id": "checkout-service"}

    async def scenario() -> None:
        async with (
            session(world, world.keys["agent_alice"]) as (alice, alice_wire),
            session(world, world.keys["agent_bob"]) as (bob, _),
        ):
            held = await alice.call_tool("titen_lease_acquire", resource)
            assert not held.is_error, text(held)
            data = held.structured_content
            assert set(data) == {"lease_id", "expires_at", "fencing_token"}
            assert data["fencing_token"] == 1
            assert holder(world, data["lease_id"], world.keys["agent_alice"]) == "agent_alice"

            conflict = await bob.call_tool("titen_lease_acquire", resource)
            assert conflict.is_error
            assert text(conflict) == (  # worded as over stdio and REST
                f"Resource is leased by another principal until {data['expires_at']}."
            )

            again = await alice.call_tool("titen_lease_acquire", resource)
            assert again.structured_content["fencing_token"] == 2
            assert again.structured_content["lease_id"] != data["lease_id"]

            # One session id, given by the first server, carried to both after initialize.
            first, *later = alice_wire.sent
            assert first[1] is None
            ids = {sent for _, sent in later}
            assert len(ids) == 1 and None not in ids
            assert {server for server, _ in later} == set(world.urls)

    run(scenario)


def test_a_handoff_shows_in_the_recipients_rest_inbox(world):
    arguments = {"to_principal": "agent_bob", "subject_id": "user_rama", "message": "Smoke ok."}

    async def scenario() -> None:
        async with session(world, world.keys["agent_alice"]) as (alice, _):
            sent = await alice.call_tool("titen_handoff", arguments)
            assert not sent.is_error, text(sent)
            assert sent.structured_content["status"] == "pending"
            handoff_id = sent.structured_content["handoff_id"]
            status, inbox = Http(world.urls[1], world.keys["agent_bob"]).request(
                "GET", "/v1/handoffs?subject_id=user_rama"
            )
            assert status == 200
            (item,) = [h for h in inbox["data"]["handoffs"] if h["handoff_id"] == handoff_id]
            assert (item["from_principal"], item["message"]) == ("agent_alice", "Smoke ok.")

            for target in ("agent_nobody", "agent_alice"):
                refused = await alice.call_tool(
                    "titen_handoff", {**arguments, "to_principal": target}
                )
                assert refused.is_error and "to_principal" in text(refused), text(refused)

    run(scenario)


def test_arguments_are_refused_in_rests_words(world):
    acquire = {**LEASE, "resource_id": "strict"}
    lease, handoff = "titen_lease_acquire", "titen_handoff"
    refusals = [
        (lease, {**acquire, "ttl_seconds": "600"}, "ttl_seconds must be of type integer."),
        (lease, {**acquire, "ttl_seconds": 5}, "ttl_seconds must be from 10 to 86400."),
        (
            lease,
            {**acquire, "resource_id": "x" * 201},
            "resource_id must be at most 200 characters.",
        ),
        (lease, {**acquire, "holder": "me"}, "Unknown field: holder."),
        (
            handoff,
            {"to_principal": "agent_bob", "subject_id": "s", "message": None},
            "message must be of type string.",
        ),
    ]

    async def scenario() -> None:
        async with session(world, world.keys["agent_alice"]) as (alice, _):
            for tool, arguments, message in refusals:
                refused = await alice.call_tool(tool, arguments)
                assert refused.is_error
                assert text(refused) == message, arguments

    run(scenario)


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer titen_" + "0" * 48, "Basic YWxpY2U6c2VjcmV0", "Bearer"],
    ids=["none", "unknown-key", "basic", "empty"],
)
def test_without_a_valid_key_it_is_401_as_a_json_rpc_error(world, authorization):
    headers = {} if authorization is None else {"authorization": authorization}
    answer = post(world, INITIALIZE, None, **headers)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert answer.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": WRONG_KEY, "data": {"code": "UNAUTHORIZED"}},
    }
    assert SESSION not in answer.headers


def test_the_sdk_client_with_a_wrong_key_is_told_so(world):
    async def scenario() -> None:
        async with session(world, "titen_" + "1" * 48):
            pass

    with pytest.raises(BaseExceptionGroup) as refused:
        run(scenario)
    assert refused.group_contains(MCPError, match=re.escape(WRONG_KEY))


def test_a_fastmcp_client_with_a_wrong_key_shows_the_services_words(world):
    async def scenario() -> None:
        async with fastmcp.Client(world.mcp, auth="titen_" + "1" * 48) as client:
            await client.list_tools()

    with pytest.raises(Exception) as refused:  # what fastmcp raises is its own
        run(scenario)
    assert WRONG_KEY in str(refused.value), repr(refused.value)


def test_a_revoked_key_is_refused_at_once_on_its_open_session(world):
    key = world.keys["agent_dora"]

    async def scenario() -> None:
        async with session(world, key) as (dora, _):
            held = await dora.call_tool("titen_lease_acquire", {**LEASE, "resource_id": "dora"})
            assert not held.is_error, text(held)
            titen(
                "keys",
                "revoke",
                "--org",
                "acme",
                "--principal",
                "agent_dora",
                database=world.database,
            )
            for _ in world.urls:  # the next request on each server is refused
                with pytest.raises(MCPError):
                    await dora.call_tool("titen_lease_acquire", {**LEASE, "resource_id": "dora2"})

    run(scenario)
    answer = post(world, call("titen_lease_acquire", {**LEASE, "resource_id": "dora3"}), key)
    assert answer.status_code == 401 and rpc_code(answer) == "UNAUTHORIZED"


def test_organizations_are_isolated_whatever_the_session_id_says(world):
    resource = {**LEASE, "resource_id": "shared-name"}
    alice, carol = world.keys["agent_alice"], world.keys["agent_carol"]

    async def scenario() -> None:
        async with (
            session(world, alice) as (as_alice, alice_wire),
            session(world, carol) as (as_carol, _),
        ):
            mine = await as_alice.call_tool("titen_lease_acquire", resource)
            theirs = await as_carol.call_tool("titen_lease_acquire", resource)
            assert not mine.is_error and not theirs.is_error, (text(mine), text(theirs))
            assert theirs.structured_content["fencing_token"] == 1  # umbrella's own resource
            lease_id = theirs.structured_content["lease_id"]
            assert holder(world, lease_id, carol) == "agent_carol"
            assert holder(world, lease_id, alice) is None

            handed = await as_carol.call_tool(
                "titen_handoff", {"to_principal": "agent_bob", "subject_id": "s"}
            )
            assert handed.is_error and "to_principal" in text(handed)

            # Alice's session id with Carol's key: as if there were no such session.
            alice_session = alice_wire.sent[-1][1]
            hijack = call("titen_lease_acquire", {**LEASE, "resource_id": "hijacked"})
            answer = post(world, hijack, carol, **{SESSION: alice_session})
            assert answer.status_code == 404
            assert rpc_code(answer) == "NOT_FOUND"
            status, _ = Http(world.urls[0], carol).request(
                "POST", "/v1/leases", {**LEASE, "resource_id": "hijacked"}
            )
            assert status == 201  # nothing was acquired by the refused call (token 1 is free)

    run(scenario)


def test_a_session_id_is_bound_to_its_key(world):
    first = post(world, INITIALIZE, world.keys["agent_alice"])
    assert first.status_code == 200
    issued = first.headers[SESSION]
    assert re.fullmatch(r"[\x21-\x7e]+", issued)
    second_key = create_key(world.database, "acme", "agent_alice")  # the same principal
    tools = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    for url in world.urls:
        same = httpx2.post(
            url + "/mcp",
            json=tools,
            timeout=ANSWER,
            headers={
                **ACCEPT,
                "authorization": f"Bearer {world.keys['agent_alice']}",
                SESSION: issued,
            },
        )
        assert same.status_code == 200, same.text
        assert {t["name"] for t in same.json()["result"]["tools"]} == TOOLS
    for key, session_id in ((second_key, issued), (world.keys["agent_alice"], "made-up")):
        refused = post(world, tools, key, **{SESSION: session_id})
        assert refused.status_code == 404
        assert rpc_code(refused) == "NOT_FOUND"


def test_stateless_posts_and_the_sdks_default_client_act_as_the_key(world):
    key = world.keys["agent_bob"]
    answer = post(world, call("titen_lease_acquire", {**LEASE, "resource_id": "stateless"}), key)
    assert answer.status_code == 200, answer.text
    assert SESSION not in answer.headers
    result = answer.json()["result"]
    assert not result["isError"], result
    assert holder(world, result["structuredContent"]["lease_id"], key) == "agent_bob"

    async def scenario() -> None:
        headers = {"authorization": f"Bearer {key}"}
        async with (
            httpx2.AsyncClient(
                headers=headers, transport=Alternating(world.urls), timeout=ANSWER
            ) as http,
            Client(streamable_http_client(world.mcp, http_client=http)) as client,
        ):
            acquired = await client.call_tool(
                "titen_lease_acquire", {**LEASE, "resource_id": "default-client"}
            )
            assert not acquired.is_error, text(acquired)
            assert holder(world, acquired.structured_content["lease_id"], key) == "agent_bob"

    run(scenario)


def test_refusals_around_the_protocol_are_clear_and_change_nothing(world):
    key = world.keys["agent_alice"]
    big = call("titen_lease_acquire", {**LEASE, "resource_id": "big", "purpose": "p" * (1 << 20)})
    too_big = post(world, big, key)
    assert too_big.status_code == 413
    assert rpc_code(too_big) == "PAYLOAD_TOO_LARGE"  # waitress's refusal, before titen's app

    bearer = {"authorization": f"Bearer {key}"}
    for method in ("GET", "DELETE"):  # no server-to-client stream, no session to end
        answer = httpx2.request(method, world.mcp, headers={**ACCEPT, **bearer})
        assert answer.status_code == 405
        assert rpc_code(answer) == "METHOD_NOT_ALLOWED"
        assert "POST" in answer.headers["allow"]

    plain = httpx2.post(world.mcp, content=b"{}", headers={**bearer, "content-type": "text/plain"})
    assert plain.status_code == 415
    assert rpc_code(plain) == "UNSUPPORTED_MEDIA_TYPE"

    broken = httpx2.post(
        world.mcp,
        content=b"{not json",
        timeout=ANSWER,
        headers={**ACCEPT, **bearer, "content-type": "application/json"},
    )
    assert broken.status_code == 400
    assert broken.json()["error"]["code"] == -32700  # JSON-RPC's parse error
    for body in ([INITIALIZE], "initialize", 2.5):
        refused = post(world, body, key)
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == NOT_A_MESSAGE, refused.text

    evil = post(world, INITIALIZE, key, origin="http://evil.example")
    assert evil.status_code == 403 and rpc_code(evil) == "FORBIDDEN"
    assert SESSION not in evil.headers
    own = post(world, INITIALIZE, key, origin=world.urls[0])
    assert own.status_code == 200, own.text

    status, _ = Http(world.urls[0], key).request(
        "POST", "/v1/leases", {**LEASE, "resource_id": "big"}
    )
    assert status == 201  # the refused acquire took nothing


@pytest.mark.skipif(NPX is None, reason="no npx to run the MCP Inspector")
def test_the_mcp_inspector_cli_lists_the_tools(world, tmp_path):
    done = subprocess.run(
        [
            NPX,
            "-y",
            INSPECTOR,
            "--cli",
            world.mcp,
            "--transport",
            "http",
            "--method",
            "tools/list",
            "--header",
            f"Authorization: Bearer {world.keys['agent_alice']}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listed = json.loads(done.stdout)
    assert {tool["name"] for tool in listed["tools"]} == TOOLS
