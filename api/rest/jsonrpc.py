"""`/mcp`'s wire: its path and session header, titen's refusals there as JSON-RPC 2.0 errors,
and what a JSON-RPC message must be (imported by the edges around it, never the MCP SDK).

An MCP client reads an error answer's body only when it is a JSON-RPC error (the MCP SDK shows
anything else as "Server returned an error response"), so every refusal on `/mcp`, whoever
decides it (a middleware, the resource, waitress's parser), keeps its status and headers and
carries REST's message and code in that shape: `api/rest/errors.py`'s `envelope` asks here.
"""

from __future__ import annotations

from typing import Any

PATH = "/mcp"
SESSION_HEADER = "Mcp-Session-Id"
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
NOT_A_MESSAGE = (
    "The request body must be one JSON-RPC 2.0 message: an object with jsonrpc 2.0 and a "
    "method (a request or a notification), or a result or an error (a response)."
)


def rpc_code(status: int) -> int:
    """JSON-RPC's code for a refusal of this HTTP status: -32600 for the client's, -32603 for
    the server's (as the MCP SDK answers its own HTTP refusals)."""
    return INTERNAL_ERROR if status >= 500 else INVALID_REQUEST


def error(code: str, message: str, rpc: int) -> dict[str, Any]:
    """The answer to a request refused before its id was read: titen's `code` under `data`."""
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": rpc, "message": message, "data": {"code": code}},
    }


def problem(message: Any) -> str | None:
    """Why a parsed body is not one JSON-RPC 2.0 message, in titen's words; None if it is one.
    Checked before the SDK reads it, whose refusal would be its model library's text."""
    if not isinstance(message, dict):
        return NOT_A_MESSAGE
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0".'
    if "method" in message:
        if "id" in message and not _is_id(message["id"]):
            return "id must be a string or an integer."
        if not isinstance(message["method"], str):
            return "method must be of type string."
        if not isinstance(message.get("params"), dict | None):
            return "params must be an object."
        return None
    if "id" not in message or ("result" in message) == ("error" in message):
        return NOT_A_MESSAGE
    if not _is_id(message["id"]) and not (message["id"] is None and "error" in message):
        return "id must be a string or an integer."
    if "result" in message:
        return None if isinstance(message["result"], dict) else "result must be an object."
    return _error_problem(message["error"])


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _error_problem(value: Any) -> str | None:
    if not isinstance(value, dict):
        return "error must be an object."
    code = value.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        return "error.code must be an integer."
    if not isinstance(value.get("message"), str):
        return "error.message must be of type string."
    return None
