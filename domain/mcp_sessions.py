"""MCP session ids that any server process can check, bound to the key that opened them.

A Streamable HTTP client keeps the `Mcp-Session-Id` its `initialize` was answered with and sends
it on every later request. Titen keeps nothing per session (api/rest/mcp.py): the tools need only
the caller, which every request's own key names, and the protocol version, which every request
carries in its `MCP-Protocol-Version` header. So a session id is a random nonce and an HMAC of
it with the hash of the key, under a key of the store's (service/store_secret.py): every worker
and every server of the store recognizes it, after restarts too, and a request with another key
(another principal's, or a second key of the same one) does not, whatever it sends. The key hash
itself is not in the id, so a leaked session id tells nothing about the key.
"""

from __future__ import annotations

import base64
import hmac
import secrets

NONCE_BYTES = 16
TAG_BYTES = 16


class SessionIds:
    """Issues session ids for a key, and tells whether an id was issued for a key."""

    def __init__(self, key: bytes):
        self._key = key

    def issue(self, key_hash: str) -> str:
        nonce = secrets.token_bytes(NONCE_BYTES)
        return _text(nonce + self._tag(nonce, key_hash))

    def belongs(self, session_id: str, key_hash: str) -> bool:
        """Whether `session_id` was issued (by any process of the store) for this key."""
        try:
            raw = base64.urlsafe_b64decode(
                session_id.encode("ascii") + b"=" * (-len(session_id) % 4)
            )
        except (ValueError, UnicodeEncodeError):
            return False
        if len(raw) != NONCE_BYTES + TAG_BYTES or _text(raw) != session_id:
            return False  # only the one spelling issued: base64 decoding skips stray characters
        nonce, tag = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
        return hmac.compare_digest(tag, self._tag(nonce, key_hash))

    def _tag(self, nonce: bytes, key_hash: str) -> bytes:
        return hmac.digest(self._key, nonce + key_hash.encode(), "sha256")[:TAG_BYTES]


def _text(raw: bytes) -> str:
    """URL-safe base64 without padding: visible ASCII, as the protocol requires of the id."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
