"""`/mcp`: the agent's two MCP tools (titen.api.mcp_tools) over Streamable HTTP, per request key.

The MCP SDK's transport runs stateless on a loop thread (api/rest/asgi.py), inside Falcon's
middleware like every route; refusals are JSON-RPC errors in REST's words (jsonrpc.py). An
`Mcp-Session-Id` is bound to the key (domain/mcp_sessions.py), so any worker of any node serves
any request; nothing is streamed (GET and DELETE answer 405), so no thread is held."""

from __future__ import annotations

import logging
from contextlib import suppress
from dataclasses import dataclass
from io import BytesIO
from typing import TYPE_CHECKING, Any

import falcon

from titen.api.rest import jsonrpc
from titen.api.rest.asgi import AsgiBridge
from titen.api.rest.auth import key_of, principal_of
from titen.api.rest.body import parse_json, read_body, require_json
from titen.api.rest.contract import INTEGER, OPEN, STRING, obj, post, ref
from titen.api.rest.errors import Refusal, error, message_of
from titen.api.rest.settings import parse_origin
from titen.domain.mcp_sessions import SessionIds
from titen.service.handoffs import HandoffService
from titen.service.leases import LeaseService

if TYPE_CHECKING:
    from starlette.applications import Starlette

CALLER = "titen.caller"  # the environ's entry: the key's principal
NO_SESSION = "No MCP session with this id for this key: initialize a new one."
FOREIGN_ORIGIN = (
    "Pages may call /mcp only from this server's own origin or one named by --cors-origin."
)
ID = {"type": ["string", "integer", "null"]}
JSON_RPC = {
    **obj(
        {
            "jsonrpc": {"type": "string", "enum": ["2.0"]},
            "id": ID,
            "method": STRING,
            "params": OPEN,
            "result": OPEN,
            "error": OPEN,
        },
        optional=("id", "method", "params", "result", "error"),
    ),
    "description": "A JSON-RPC 2.0 message of the Model Context Protocol: a request (`id`, "
    "`method`, `params`), a notification (no `id`) or a response (`result` or `error`).",
    "additionalProperties": True,
}
MCP_ERROR = "McpError"
DATA = {**obj({"code": ref("ErrorCode")}), "additionalProperties": True}
JSON_RPC_ERROR = {
    **obj(
        {
            "jsonrpc": {"type": "string", "enum": ["2.0"]},
            "id": ID,
            "error": obj({"code": INTEGER, "message": STRING, "data": DATA}, optional=("data",)),
        }
    ),
    "description": "A JSON-RPC 2.0 error. Titen's refusals (401, 403, 413, 415, 429, 503...) "
    "carry REST's message, and its code in `data.code`; the protocol's own (400, 404, 406) "
    "may carry no `data`.",
}


@dataclass
class Mcp:
    contract = post(
        "mcp",
        "MCP Streamable HTTP: one JSON-RPC message in, its answer out (docs/clients.md).",
        description="The Model Context Protocol endpoint with the tools titen_lease_acquire and "
        "titen_handoff, acting as the key's principal. Opaque here: the protocol's own JSON-RPC "
        "messages, answered with JSON-RPC (a notification: 202, no body); every refusal, titen's "
        "or the protocol's, is a JSON-RPC error. A page may call it only from the server's own "
        "origin or a `--cors-origin`. `Mcp-Session-Id`, given with the answer to `initialize`, is "
        "optional and bound to the key.",
        body=JSON_RPC,
        answer=JSON_RPC,
        bodiless=(202,),
        errors=("FORBIDDEN", "NOT_FOUND"),
        error_schema=MCP_ERROR,
        protocol_errors=(400, 404, 406),  # the SDK's own JSON-RPC errors
        components={MCP_ERROR: JSON_RPC_ERROR},
    )

    leases: LeaseService
    handoffs: HandoffService
    mcp_sessions: SessionIds
    origins: tuple[str, ...]  # besides the server's own (`--cors-origin`)

    def __post_init__(self) -> None:
        # The SDK logs each stateless request's end at INFO: the request log has it.
        logging.getLogger("mcp.server").setLevel(logging.WARNING)
        self.bridge = AsgiBridge(lambda: _sdk_app(self.leases, self.handoffs))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        self._check_origin(req)
        raw = read_body(req)
        require_json(req)
        message = _message(raw)
        key_hash, _ = key_of(req)
        session = req.get_header(jsonrpc.SESSION_HEADER)
        if session is not None and not self.mcp_sessions.belongs(session, key_hash):
            raise error(404, NO_SESSION)
        environ = {
            **req.env,
            "wsgi.input": BytesIO(raw),
            "CONTENT_LENGTH": str(len(raw)),
            CALLER: principal_of(req),
        }
        environ.pop("HTTP_CONTENT_ENCODING", None)  # inflated by read_body
        resp.status_code, headers, resp.data = self.bridge.call(environ)
        resp.set_headers(headers)  # Content-Length too, which Falcon sets again from the data
        if session is None and resp.status_code == 200 and message.get("method") == "initialize":
            resp.set_header(jsonrpc.SESSION_HEADER, self.mcp_sessions.issue(key_hash))

    def _check_origin(self, req: falcon.Request) -> None:
        """403 for a page of another origin (against DNS rebinding); no `Origin`: no page. The
        server's own origin is the Host it was reached at, over http or (behind a proxy ending
        TLS) https."""
        origin = req.get_header("Origin")
        if origin is None:
            return
        with suppress(ValueError):  # an Origin, or a Host, that no origin can name
            origin = parse_origin(origin)
            own = f"{origin.partition(':')[0]}://{req.get_header('Host') or ''}"
            if origin in self.origins or origin == parse_origin(own):
                return
        raise error(403, FOREIGN_ORIGIN)


def _message(raw: bytes) -> dict[str, Any]:
    """The body as one JSON-RPC message, refused in titen's words before the SDK's."""
    try:
        message = parse_json(raw, "The request body")
    except Refusal as refused:
        raise error(400, message_of(refused), rpc=jsonrpc.PARSE_ERROR) from None
    if (problem := jsonrpc.problem(message)) is not None:
        raise error(400, problem, rpc=jsonrpc.INVALID_REQUEST)
    return message


def _sdk_app(leases: LeaseService, handoffs: HandoffService) -> Starlette:
    """The SDK's app, imported at the first `/mcp` request: the SDK is about half of what a
    server process would import."""
    from titen.api.rest.mcp_app import transport

    return transport(leases, handoffs, jsonrpc.PATH, CALLER)
