"""Event tickets: how a browser reads the event log, since EventSource cannot send a key.

A page's server asks `POST /v1/events/tickets` with its key and hands the page a ticket; the page
opens `GET /v1/events/stream?ticket=…` (or polls `GET /v1/events?ticket=…`). A ticket opens
those two reads and nothing else, for ten minutes, and dies with its key. Tickets are rows, not
signed tokens: 192 random bits, stored only as a hash (as keys are) beside the hash of the key
that asked. Every server process sharing the database accepts one, and the query that redeems it
joins the key's row, so a revoked key ends its tickets with no second mechanism (its streams
watch the key: service/revocations.py); a signed token would need that lookup too. Expired rows
are deleted whenever a ticket is issued.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from titen.domain.clock import Clock, iso
from titen.projections.store import ViewStore
from titen.service.keys import Principal, key_hash

TICKET_PREFIX = "titen_ticket_"
"""Tells a ticket from a key at a glance (a ticket is refused wherever a key is asked for)."""
LIFETIME = timedelta(minutes=10)


@dataclass(frozen=True)
class Ticket:
    ticket: str
    expires_at: datetime


@dataclass(frozen=True)
class Redeemed:
    """What a valid ticket stands for: its key's principal, and the key (to watch it)."""

    principal: Principal
    key_hash: str


class Tickets:
    def __init__(self, store: ViewStore, clock: Clock):
        self.store = store
        self.clock = clock
        with store.writing() as writer:
            writer.execute(
                "CREATE TABLE IF NOT EXISTS {event_tickets} ("
                " ticket_hash TEXT PRIMARY KEY, key_hash TEXT NOT NULL,"
                " expires_at TEXT NOT NULL)"
            )
            writer.execute(
                "CREATE INDEX IF NOT EXISTS event_tickets_expiry ON {event_tickets} (expires_at)"
            )

    def issue(self, hashed_key: str) -> Ticket:
        """A new ticket for the key with this hash (the whole ticket is returned this once)."""
        ticket = TICKET_PREFIX + secrets.token_hex(24)
        now = self.clock.now()
        expires_at = now + LIFETIME
        with self.store.writing() as writer:
            writer.execute("DELETE FROM {event_tickets} WHERE expires_at <= %s", [iso(now)])
            writer.execute(
                "INSERT INTO {event_tickets} VALUES (%s, %s, %s)",
                [key_hash(ticket), hashed_key, iso(expires_at)],
            )
        return Ticket(ticket, expires_at)

    def redeem(self, ticket: str) -> Redeemed | None:
        """The principal of an unexpired ticket whose key is not revoked, else None."""
        rows = self.store.query(
            "SELECT k.organization, k.principal, k.role, k.key_hash"
            " FROM {event_tickets} t JOIN {api_keys} k ON k.key_hash = t.key_hash"
            " WHERE t.ticket_hash = %s AND t.expires_at > %s AND k.revoked_at IS NULL",
            [key_hash(ticket), iso(self.clock.now())],
        )
        if not rows:
            return None
        row = rows[0]
        principal = Principal(row["organization"], row["principal"], row["role"])
        return Redeemed(principal, row["key_hash"])
