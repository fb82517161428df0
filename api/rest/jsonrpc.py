"""`/mcp`'s wire without the MCP SDK: its path, titen's refusals as JSON-RPC 2.0 errors, and
what a JSON-RPC message must be. An MCP client reads an error's body only when it is a
JSON-RPC error, so every refusal on `/mcp`, whoever decides it, is one (errors.envelope)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PATH = "/mcp"
SESSION_HEADER = "Mcp-Session-Id"
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
ID_WORDS = "id must be a string, an integer or null."
NOT_A_MESSAGE = (
    "The request body must be one JSON-RPC 2.0 message: an object with jsonrpc 2.0 and a "
    "method (a request or a notification), or a result or an error (a response)."
)


def rpc_code(status: int) -> int:
    """The client's refusals -32600, the server's -32603 (as the MCP SDK answers its own)."""
    return INTERNAL_ERROR if status >= 500 else INVALID_REQUEST


def error(code: str, message: str, rpc: int) -> dict[str, Any]:
    """A refusal before the id was read: titen's `code` under `data`."""
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": rpc, "message": message, "data": {"code": code}},
    }


def problem(message: Any) -> str | None:
    """Why a parsed body is not one JSON-RPC 2.0 message, in titen's words; None if it is."""
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


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_error(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and _is_integer(value.get("code"))
        and isinstance(value.get("message"), str)
    )


MEMBERS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("id", lambda v: v is None or isinstance(v, str) or _is_integer(v), ID_WORDS),
    ("method", lambda v: isinstance(v, str), "method must be of type string."),
    ("params", lambda v: isinstance(v, dict), "params must be an object."),
    ("result", lambda v: isinstance(v, dict), "result must be an object."),
    ("error", _is_error, "error must be an object with an integer code and a string message."),
)
