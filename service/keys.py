"""API keys: who a caller is. Stored hashed; only a prefix is ever shown again.

Credentials are configuration of the edge, not facts of the domain, so they live in a plain
table beside the read models rather than in the event log.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from titen.domain.clock import Clock, iso
from titen.projections.store import ViewStore
from titen.service.roles import OPERATOR, ROLES

KEY_PREFIX = "titen_"
SHOWN_CHARS = len(KEY_PREFIX) + 8


@dataclass(frozen=True)
class Principal:
    organization: str
    name: str
    role: str

    @property
    def is_operator(self) -> bool:
        return self.role == OPERATOR


class KeyRefused(ValueError):
    """A key command was refused (the message says why)."""


class Keys:
    def __init__(self, store: ViewStore, clock: Clock):
        self.store = store
        self.clock = clock
        with store.writing() as writer:
            writer.execute(
                "CREATE TABLE IF NOT EXISTS {api_keys} ("
                " key_hash TEXT PRIMARY KEY, key_prefix TEXT NOT NULL,"
                " organization TEXT NOT NULL, principal TEXT NOT NULL, role TEXT NOT NULL,"
                " created_at TEXT NOT NULL, revoked_at TEXT)"
            )
            writer.execute(
                "CREATE INDEX IF NOT EXISTS api_keys_principal ON {api_keys}"
                " (organization, principal)"
            )

    def create(self, organization: str, principal: str, role: str) -> str:
        """A new key for the principal; the whole key is returned this once."""
        if role not in ROLES:
            raise KeyRefused(f"role must be one of: {', '.join(ROLES)}")
        key = KEY_PREFIX + secrets.token_hex(24)
        with self.store.writing() as writer:
            roles = writer.fetchall(
                "SELECT DISTINCT role FROM {api_keys} WHERE organization = %s AND principal = %s",
                [organization, principal],
            )
            if roles and roles[0]["role"] != role:
                raise KeyRefused(f"{principal} already has the {roles[0]['role']} role")
            writer.execute(
                "INSERT INTO {api_keys} VALUES (%s, %s, %s, %s, %s, %s, NULL)",
                [
                    _hash(key),
                    key[:SHOWN_CHARS],
                    organization,
                    principal,
                    role,
                    iso(self.clock.now()),
                ],
            )
        return key

    def list(self, organization: str) -> list[dict[str, Any]]:
        return self.store.query(
            "SELECT principal, role, key_prefix, created_at, revoked_at FROM {api_keys}"
            " WHERE organization = %s ORDER BY principal, created_at",
            [organization],
        )

    def revoke(self, organization: str, *, principal: str | None, key_prefix: str | None) -> int:
        """Revoke a principal's keys, or the one key with that prefix; returns how many."""
        column, value = ("principal", principal) if principal else ("key_prefix", key_prefix)
        with self.store.writing() as writer:
            revoked = writer.fetchall(
                f"UPDATE {{api_keys}} SET revoked_at = %s WHERE organization = %s"
                f" AND {column} = %s AND revoked_at IS NULL RETURNING key_hash",
                [iso(self.clock.now()), organization, value],
            )
        return len(revoked)

    def authenticate(self, key: str) -> Principal | None:
        rows = self.store.query(
            "SELECT organization, principal, role FROM {api_keys}"
            " WHERE key_hash = %s AND revoked_at IS NULL",
            [_hash(key)],
        )
        if not rows:
            return None
        row = rows[0]
        return Principal(row["organization"], row["principal"], row["role"])

    def is_principal(self, organization: str, name: str) -> bool:
        """Whether `name` has ever been given a key in the organization."""
        return bool(
            self.store.query(
                "SELECT 1 AS found FROM {api_keys} WHERE organization = %s AND principal = %s"
                " LIMIT 1",
                [organization, name],
            )
        )


def _hash(key: str) -> str:
    """Keys are 192 random bits, so a plain digest cannot be reversed by guessing."""
    return hashlib.sha256(key.encode()).hexdigest()
