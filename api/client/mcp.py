"""`titen mcp`: the agent's two tools (titen.api.mcp_tools) over MCP stdio.

The server acts under the agent's own key by calling the REST API through `titen.client`; it never
opens the database, so an agent needs a URL and a key, nothing else. A refusal, a refused key or
an unreachable server becomes a tool error carrying the client's words alone, and the process
keeps serving. `titen serve` offers the same tools at `/mcp` over Streamable HTTP
(api/rest/mcp.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from titen.api.mcp_tools import HandoffSent, LeaseAcquired, Refused, build
from titen.client import TitenClient, TitenError
from titen.domain.clock import iso


@contextmanager
def _refusals() -> Iterator[None]:
    """A refusal or an unreachable service: a tool error in the client's words."""
    try:
        yield
    except TitenError as exc:
        raise Refused(exc.message) from exc


class ClientAgent:
    """The tools' calls as REST requests under one key: every call acts as that key's principal."""

    def __init__(self, client: TitenClient):
        self.client = client

    def acquire_lease(
        self, resource_type: str, resource_id: str, purpose: str, ttl_seconds: int
    ) -> LeaseAcquired:
        with _refusals():
            lease = self.client.acquire_lease(
                resource_type, resource_id, purpose=purpose, ttl_seconds=ttl_seconds
            )
        return LeaseAcquired(
            lease_id=lease.lease_id,
            expires_at=iso(lease.expires_at),
            fencing_token=lease.fencing_token,
        )

    def create_handoff(
        self, to_principal: str, subject_id: str, message: str | None
    ) -> HandoffSent:
        with _refusals():
            sent = self.client.create_handoff(to_principal, subject_id, message=message)
        return HandoffSent(handoff_id=sent.handoff_id, status=sent.status)


def serve(client: TitenClient) -> None:
    """Serve over stdin/stdout until the MCP client closes the connection."""
    agent = ClientAgent(client)
    build(lambda ctx: agent).run("stdio")
