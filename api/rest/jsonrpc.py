"""`/mcp`'s wire: its path and session header, titen's refusals there as JSON-RPC 2.0 errors,
and what a JSON-RPC message must be (imported by the edges around it, never the MCP SDK).

An MCP client reads an error answer's body only when it is a JSON-RPC error (the MCP SDK shows
anything else as "Server returned an error response"), so every refusal on `/mcp`, whoever
decides it (a middleware, the resource, waitress's parser), keeps its status and headers and
carries REST's message and code in that shape: `api/rest/errors.py`'s `envelope` asks here.
"""

from __future__ import annotations

from collections.abc import Callable
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
    Checked before the SDK reads it, whose refusal would be its model library's text. Every
    member it knows is checked wherever it appears, as the OpenAPI document's schema says."""
    if not isinstance(message, dict):
        return NOT_A_MESSAGE
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0".'
    for name, fits, words in MEMBERS:
        if name in message and not fits(message[name]):
            return words
    if "method" in message:
        return None
    if "id" not in message or ("result" in message) == ("error" in message):
        return NOT_A_MESSAGE
    if message["id"] is None and "result" in message:
        return "id must be a string or an integer."
    return None


def _is_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or _is_integer(value)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_error(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and _is_integer(value.get("code"))
        and isinstance(value.get("message"), str)
    )


MEMBERS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("id", _is_id, "id must be a string, an integer or null."),
    ("method", lambda value: isinstance(value, str), "method must be of type string."),
    ("params", lambda value: isinstance(value, dict), "params must be an object."),
    ("result", lambda value: isinstance(value, dict), "result must be an object."),
    ("error", _is_error, "error must be an object with an integer code and a string message."),
)
