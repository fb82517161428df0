"""Public identifiers: a prefix naming the kind, then 32 hex digits of a UUID.

A new UUID is time-ordered (RFC 9562's version 7: 48 bits of Unix milliseconds, 74 random), so
rows keyed by new ids go in at the end of their indexes: random ids would dirty a page anywhere
in each of the four indexes a lease id keys (three read-model tables, the log's subject index),
which SQLite writes to its WAL at every commit and again at every checkpoint. The time only
places an id in an index: nothing orders, compares or checks ids by it, so the clocks of two
nodes may disagree, and version 4 ids (random) of earlier releases are as valid as new ones.
"""

from __future__ import annotations

import os
import time
from uuid import UUID

LEASE = "lease_"
HANDOFF = "hoff_"
AGENT = "agent_"


def new_uuid() -> UUID:
    """A new time-ordered UUID: RFC 9562's version 7, whose 48 bits of Unix milliseconds are
    followed by 74 random bits (12 before the variant, 62 after it). Guessing one takes about
    10^22 tries even knowing the millisecond it was made in, which the API shows anyway (as
    `acquired_at` or `created_at`)."""
    milliseconds = time.time_ns() // 1_000_000
    random = int.from_bytes(os.urandom(10), "big")
    high, low = random >> 68, random & ((1 << 62) - 1)
    return UUID(int=milliseconds << 80 | 0x7 << 76 | high << 64 | 0b10 << 62 | low)


def new_id(prefix: str) -> str:
    return prefix + new_uuid().hex


def to_uuid(prefix: str, public_id: str) -> UUID | None:
    """The UUID inside a public id, or None when the text is not of that kind."""
    digits = public_id.removeprefix(prefix)
    if digits == public_id or len(digits) != 32:
        return None
    try:
        return UUID(hex=digits)
    except ValueError:
        return None
