"""The agent's two MCP tools, titen_lease_acquire and titen_handoff, for every transport.

One definition serves `titen mcp` (stdio, calling the REST API: api/client/mcp.py) and `titen
serve`'s `/mcp` (Streamable HTTP, calling the services: api/rest/mcp.py), so the two cannot
drift. Release, resolve and the inbox stay REST-only (spec, "From MCP"). Arguments are checked
by REST's own schemas and validator (titen.api.validation) before anything else sees them: the
SDK's model would coerce `"600"` to 600 and `true` to 1, and word refusals as pydantic does. A
refusal, a conflict or an unavailable service is a tool error whose text is the service's
message alone: the SDK would prefix and log it, over stdio into the MCP host's log. The server
keeps serving after any of them. Each call acts as `agent_of(ctx)` (over HTTP, the principal of
the request's key), which raises `Refused` with the service's words when the service refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import version
from typing import Annotated, Any, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations
from pydantic import BaseModel, Field, WithJsonSchema

from titen.api.schemas import ACQUIRE, CREATE_HANDOFF, body
from titen.api.validation import refusal, validator
from titen.domain.statuses import PENDING

LEASE_FIELDS: dict[str, Any] = ACQUIRE["properties"]
HANDOFF_FIELDS: dict[str, Any] = CREATE_HANDOFF["properties"]
HANDOFF_ARGUMENTS = body(
    {name: HANDOFF_FIELDS[name] for name in ("to_principal", "subject_id", "message")},
    required=["to_principal", "subject_id"],
)
"""The handoff tool takes part of the REST body: context and checkpoint stay REST-only."""
CHECKERS = {
    "titen_lease_acquire": validator(ACQUIRE),
    "titen_handoff": validator(HANDOFF_ARGUMENTS),
}

INSTRUCTIONS = (
    "Titen records who is doing what, so that agents sharing work do not do the same "
    "destructive thing twice. Before work that must not run twice, take a lease with "
    "titen_lease_acquire; to pass unfinished work to another principal, use titen_handoff."
)
LEASE_DESCRIPTION = """\
Claim a resource (a deploy target, a migration, a ticket...) for a bounded time before starting \
work that must not be done twice at once.

A lease is advisory: it blocks nothing by itself. It is a fact every agent checks by acquiring \
the same resource_type and resource_id before it starts, so spell them the way the other agents \
do.

If another principal holds an unexpired lease, this fails with "Resource is leased by another \
principal until <time>.": someone else is doing this work. Do not start it; come back after that \
time or take other work. The error tells nothing else about the holder, by design.

Acquiring again as the current holder (or after the lease expired) supersedes it: you get a new \
lease_id and the old one stops existing, so always keep the newest. There is no renew; acquire \
again before expires_at to extend. This tool cannot release: the lease lapses at expires_at \
unless your runtime releases it over REST, so ask for the shortest TTL that covers the work.

The result's fencing_token is one more than the resource's previous acquire. If the system you \
are about to change accepts one, pass the newest token with each write: it can then refuse a \
holder whose lease was taken over while it was paused.\
"""
HANDOFF_DESCRIPTION = """\
Pass unfinished work to another principal (an agent or a person) of your organization, on \
purpose: who should continue (to_principal), about what (subject_id), and optionally a message \
with what is done and what is left.

The handoff starts pending in the recipient's inbox, and only the recipient can accept or reject \
it. It transfers nothing else: a lease you hold stays yours until it is released or expires, \
and the recipient acquires its own. to_principal must be an existing principal of your \
organization, other than you.\
"""


# Each parameter publishes the REST field's own schema (bounds, pattern) under its meaning.
ResourceType = Annotated[
    str,
    WithJsonSchema(LEASE_FIELDS["resource_type"]),
    Field(description="The kind of resource, such as deploy, migration or ticket."),
]
ResourceId = Annotated[
    str,
    WithJsonSchema(LEASE_FIELDS["resource_id"]),
    Field(description="Which one of that kind, such as checkout-service."),
]
Purpose = Annotated[
    str,
    WithJsonSchema(LEASE_FIELDS["purpose"]),
    Field(description="What you are about to do, in a sentence; recorded with the lease."),
]
TtlSeconds = Annotated[
    int,
    WithJsonSchema(LEASE_FIELDS["ttl_seconds"]),
    Field(description="Seconds until the lease lapses; a crashed holder blocks it that long."),
]
ToPrincipal = Annotated[
    str,
    WithJsonSchema(HANDOFF_FIELDS["to_principal"]),
    Field(description="The principal of your organization who should continue the work."),
]
SubjectId = Annotated[
    str,
    WithJsonSchema(HANDOFF_FIELDS["subject_id"]),
    Field(description="The id of what the work is about."),
]
Message = Annotated[
    str,
    WithJsonSchema(HANDOFF_FIELDS["message"]),
    Field(
        description="Optional: what is done, what is left, and anything the recipient needs.",
        json_schema_extra=lambda schema: schema.pop("default", None),
    ),
]
"""Optional, with no default in the schema: leave it out for none (null is no string)."""


class LeaseAcquired(BaseModel):
    lease_id: str = Field(description="This lease's id; a later acquire replaces it.")
    expires_at: str = Field(
        description="When the lease lapses (UTC, ISO 8601); after it anyone may take it.",
        json_schema_extra={"format": "date-time"},
    )
    fencing_token: int = Field(
        description="1 for the resource's first acquire, one more for each later one; pass it "
        "to the system you write to, so it can refuse a holder whose lease was since taken."
    )


class HandoffSent(BaseModel):
    handoff_id: str = Field(description="The handoff's id, for the recipient to resolve.")
    status: str = Field(
        description="Always pending at first; the recipient resolves it.",
        json_schema_extra={"enum": [PENDING]},
    )


class Refused(Exception):
    """The service refused a tool's call (or could not be reached): `message` is its words."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ValidatingServer(MCPServer):
    """An MCP server whose tools' arguments are checked as REST checks a body, before the SDK's
    model sees them, and whose tool errors carry the service's words alone. Its tools' input
    schemas say that unknown arguments are refused, as the checks do."""

    async def list_tools(self) -> list[Tool]:
        return [
            tool.model_copy(update={"input_schema": _closed(tool.name, tool.input_schema)})
            for tool in await super().list_tools()
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        checker = CHECKERS.get(name)
        refused = None if checker is None else refusal(arguments, checker)
        if refused is not None:
            return _tool_error(refused)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as failed:  # the SDK's wrapper; its cause is what the tool raised
            if isinstance(failed.__cause__, Refused):
                return _tool_error(failed.__cause__.message)
            raise


def _closed(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema with its checker's `additionalProperties` (false: refused)."""
    checker = CHECKERS.get(name)
    if checker is None:
        return schema
    return {**schema, "additionalProperties": checker.schema["additionalProperties"]}


def _tool_error(message: str) -> CallToolResult:
    """A failed call as the model reads it: the message, flagged as an error."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


class Agent(Protocol):
    """Who acts on a tool call; raises Refused with the service's words on a refusal."""

    def acquire_lease(
        self, resource_type: str, resource_id: str, purpose: str, ttl_seconds: int
    ) -> LeaseAcquired: ...

    def create_handoff(
        self, to_principal: str, subject_id: str, message: str | None
    ) -> HandoffSent: ...


def build(agent_of: Callable[[Context], Agent]) -> MCPServer:
    """The MCP server with exactly the two agent tools, each a call on `agent_of(ctx)`."""
    server = ValidatingServer(name="titen", version=version("titen"), instructions=INSTRUCTIONS)
    annotations = ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    )

    @server.tool(
        name="titen_lease_acquire",
        title="Acquire a lease",
        description=LEASE_DESCRIPTION,
        annotations=annotations,
    )
    def titen_lease_acquire(
        resource_type: ResourceType,
        resource_id: ResourceId,
        purpose: Purpose,
        ttl_seconds: TtlSeconds,
        ctx: Context,
    ) -> LeaseAcquired:
        return agent_of(ctx).acquire_lease(resource_type, resource_id, purpose, ttl_seconds)

    @server.tool(
        name="titen_handoff",
        title="Hand work to another principal",
        description=HANDOFF_DESCRIPTION,
        annotations=annotations,
    )
    def titen_handoff(
        to_principal: ToPrincipal,
        subject_id: SubjectId,
        ctx: Context,
        message: Message = None,  # type: ignore[assignment]  # never null: CHECKERS refuse it
    ) -> HandoffSent:
        return agent_of(ctx).create_handoff(to_principal, subject_id, message)

    return server
