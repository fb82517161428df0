"""Public identifiers: a prefix naming the kind, then 32 hex digits of a UUID."""

from __future__ import annotations

from uuid import UUID, uuid4

LEASE = "lease_"
HANDOFF = "hoff_"
AGENT = "agent_"


def new_id(prefix: str) -> str:
    return prefix + uuid4().hex


def to_uuid(prefix: str, public_id: str) -> UUID | None:
    """The UUID inside a public id, or None when the text is not of that kind."""
    digits = public_id.removeprefix(prefix)
    if digits == public_id or len(digits) != 32:
        return None
    try:
        return UUID(hex=digits)
    except ValueError:
        return None
