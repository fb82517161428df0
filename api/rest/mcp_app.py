"""The MCP SDK's app behind `/mcp`, its tools acting as each HTTP request's caller: a module of
its own so that the SDK is imported only at the first `/mcp` request (mcp.py, `_sdk_app`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from titen.api.mcp_tools import HandoffSent, LeaseAcquired, Refused, build
from titen.api.rest.body import MAX_BODY_BYTES
from titen.api.rest.errors import DEFAULT_MESSAGES, log, message_of, refusal_of
from titen.api.rest.leases import acquired
from titen.service.handoffs import HandoffService
from titen.service.keys import Principal
from titen.service.leases import LeaseService


def transport(leases: LeaseService, handoffs: HandoffService, path: str, caller: str) -> Starlette:
    """The SDK's transport at `path`, the tools acting as the WSGI environ's `caller` (the SDK
    hands each call its HTTP request, whose scope a2wsgi gave the environ)."""

    def agent(ctx: Context) -> ServiceAgent:
        request = ctx.request_context.request
        if request is None:
            raise RuntimeError("an MCP tool over HTTP was called without its HTTP request")
        return ServiceAgent(leases, handoffs, request.scope["wsgi_environ"][caller])

    return build(agent).streamable_http_app(
        streamable_http_path=path,
        json_response=True,
        stateless_http=True,
        max_request_body_size=MAX_BODY_BYTES,
        # A browser page reaching this port has no key, and every request needs one.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )


@dataclass
class ServiceAgent:
    leases: LeaseService
    handoffs: HandoffService
    caller: Principal

    def acquire_lease(
        self, resource_type: str, resource_id: str, purpose: str, ttl_seconds: int
    ) -> LeaseAcquired:
        with _as_tool_error():
            holding = self.leases.acquire(
                self.caller,
                resource_type=resource_type,
                resource_id=resource_id,
                purpose=purpose,
                ttl=ttl_seconds,
            )
        return LeaseAcquired(**acquired(holding)["data"])

    def create_handoff(
        self, to_principal: str, subject_id: str, message: str | None
    ) -> HandoffSent:
        with _as_tool_error():
            sent = self.handoffs.create(
                self.caller,
                to_principal=to_principal,
                subject_id=subject_id,
                context_id=None,
                checkpoint_id=None,
                message=message,
            )
        return HandoffSent(handoff_id=sent.handoff_id, status=sent.status)


@contextmanager
def _as_tool_error() -> Iterator[None]:
    """A refusal or an outage: a tool error in REST's words; anything else a logged 500."""
    try:
        yield
    except Exception as exc:
        refused = refusal_of(exc)
        if refused is None:
            log.exception("unhandled error in an MCP tool")
            raise Refused(DEFAULT_MESSAGES[500]) from exc
        raise Refused(message_of(refused)) from exc
