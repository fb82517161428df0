"""What an agent imports: `from titen.client import TitenClient`.

This package holds the agent side (the REST client and the MCP server) and imports nothing of
the server, so it loads fast in an agent's own environment (tests/e2e/test_light_imports.py).
"""

from titen.client.errors import (
    LeaseConflict,
    LeaseLost,
    NotFound,
    TitenError,
    Unauthorized,
    Unreachable,
    ValidationError,
)
from titen.client.rest import HeldLease, TitenClient
from titen.client.types import (
    CurrentLease,
    EventPage,
    Handoff,
    HandoffCreated,
    InboxPage,
    Lease,
    LeasePage,
)

__all__ = [
    "CurrentLease",
    "EventPage",
    "Handoff",
    "HandoffCreated",
    "HeldLease",
    "InboxPage",
    "Lease",
    "LeaseConflict",
    "LeaseLost",
    "LeasePage",
    "NotFound",
    "TitenClient",
    "TitenError",
    "Unauthorized",
    "Unreachable",
    "ValidationError",
]
