"""API keys: who a caller is. Stored hashed; only a prefix is ever shown again.

Credentials are configuration of the edge, not facts of the domain, so they live in a plain
table beside the read models rather than in the event log.

Every request authenticates, so principals are kept in memory by key hash. A cached principal
is trusted only while this process cannot miss a revocation: every revoke bumps a revision row
in its own transaction and, on PostgreSQL, sends a NOTIFY on commit. On PostgreSQL the cache is
used only while the `Revocations` listener (service/revocations.py) is connected; on SQLite,
which cannot push, each lookup first reads the one-row revision (a single-page read on a
pooled connection) and drops the cache when it moved.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from titen.domain import identifiers
from titen.domain.clock import Clock, iso
from titen.projections.store import ViewStore
from titen.service.roles import OPERATOR, ROLES, WHOLE_LOG

KEY_PREFIX = "titen_"
SHOWN_CHARS = len(KEY_PREFIX) + 8
CACHE_LIMIT = 10_000  # principals kept per process; past it the cache starts again empty


@dataclass(frozen=True)
class Principal:
    organization: str
    name: str
    role: str

    @property
    def is_operator(self) -> bool:
        return self.role == OPERATOR

    @property
    def party(self) -> str | None:
        """Whose events it reads of its organization's log: None for all of them (a dispatcher,
        an operator), else its own name (an agent: the leases it holds or held, the handoffs
        it sent or received)."""
        return None if self.role in WHOLE_LOG else self.name

    @property
    def reads_organization(self) -> bool:
        """Whether it may list the organization's leases and pending handoffs (a role of
        WHOLE_LOG): an agent sees only what it is party to."""
        return self.role in WHOLE_LOG


class KeyRefused(ValueError):
    """A key command was refused (the message says why)."""


class Keys:
    def __init__(self, store: ViewStore, clock: Clock):
        self.store = store
        self.clock = clock
        self.pushes_revocations = store.notifies
        self._cache: dict[str, Principal] = {}
        self._generation = 0  # moves whenever the cache is dropped
        self._seen_revision: int | None = None  # SQLite: the revision the cache is valid for
        self._listening = False  # PostgreSQL: a revocation listener is connected
        self._lock = threading.Lock()
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
            writer.execute(
                "CREATE TABLE IF NOT EXISTS {api_key_revision} ("
                " id INTEGER PRIMARY KEY, revision BIGINT NOT NULL)"
            )
            writer.execute(
                "INSERT INTO {api_key_revision} VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
            )

    @property
    def channel(self) -> str:
        """The PostgreSQL NOTIFY channel of this store's revocations (one per schema)."""
        schema = getattr(self.store.datastore, "schema", "") or "public"
        return "titen_keys_" + hashlib.sha256(schema.encode()).hexdigest()[:16]

    def create(self, organization: str, principal: str, role: str) -> str:
        """A new key for the principal; the whole key is returned this once."""
        if role not in ROLES:
            raise KeyRefused(f"role must be one of: {', '.join(ROLES)}")
        for field, refused in (
            ("organization", identifiers.organization_problem(organization)),
            ("principal", identifiers.problem(principal)),
        ):
            if refused:
                raise KeyRefused(f"{field} {refused}")
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
                    key_hash(key),
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
        """Revoke a principal's keys, or the one key with that prefix; returns how many.

        The revision moves and the NOTIFY is sent in the same transaction, so every process
        learns of the revocation exactly when it is committed.
        """
        column, value = ("principal", principal) if principal else ("key_prefix", key_prefix)
        with self.store.writing() as writer:
            revoked = writer.fetchall(
                f"UPDATE {{api_keys}} SET revoked_at = %s WHERE organization = %s"
                f" AND {column} = %s AND revoked_at IS NULL RETURNING key_hash",
                [iso(self.clock.now()), organization, value],
            )
            if revoked:
                writer.execute("UPDATE {api_key_revision} SET revision = revision + 1")
                if self.pushes_revocations:
                    writer.execute("SELECT pg_notify(%s, '')", [self.channel])
        return len(revoked)

    def authenticate(self, key: str) -> Principal | None:
        return self.authenticate_hash(key_hash(key))

    def authenticate_hash(self, hashed: str) -> Principal | None:
        """The principal of an unrevoked key, from memory when that cannot be stale."""
        trusted = self._cache_trusted()
        with self._lock:
            generation = self._generation
            if trusted and (cached := self._cache.get(hashed)) is not None:
                return cached
        rows = self.store.query(
            "SELECT organization, principal, role FROM {api_keys}"
            " WHERE key_hash = %s AND revoked_at IS NULL",
            [hashed],
        )
        if not rows:
            return None
        row = rows[0]
        principal = Principal(row["organization"], row["principal"], row["role"])
        with self._lock:
            # Not if the cache was dropped meanwhile: the row read may predate a revocation.
            if trusted and generation == self._generation:
                if len(self._cache) >= CACHE_LIMIT:
                    self._cache.clear()
                self._cache[hashed] = principal
        return principal

    def cached(self, hashed: str) -> Principal | None:
        """The principal of a key hash if this process has it in memory, whether or not the
        cache is known to be current (a revoked key may still be there): for what never changes
        with a key, its organization, read without touching the database."""
        return self._cache.get(hashed)

    @property
    def generation(self) -> int:
        """Moves whenever cached principals are dropped, so at least with every revocation."""
        return self._generation

    def revision(self) -> int:
        """How many revoking commits the store has seen (moves with every revocation)."""
        return int(self.store.query("SELECT revision FROM {api_key_revision}")[0]["revision"])

    def live(self, hashes: Iterable[str]) -> set[str]:
        """Which of these key hashes are of unrevoked keys."""
        wanted = sorted(set(hashes))
        if not wanted:
            return set()
        marks = ", ".join(["%s"] * len(wanted))
        rows = self.store.query(
            f"SELECT key_hash FROM {{api_keys}} WHERE key_hash IN ({marks}) AND revoked_at IS NULL",
            wanted,
        )
        return {row["key_hash"] for row in rows}

    def forget(self) -> None:
        """Drop every cached principal (a revocation was committed, or may have been missed)."""
        with self._lock:
            self._cache.clear()
            self._generation += 1

    @property
    def listening(self) -> bool:
        """PostgreSQL: whether a revocation listener is connected (so the cache is used)."""
        return self._listening

    def set_listening(self, connected: bool) -> None:
        """Told by the PostgreSQL listener whether it follows revocations right now."""
        with self._lock:
            self._listening = connected
            self._cache.clear()
            self._generation += 1

    def _cache_trusted(self) -> bool:
        if self.pushes_revocations:
            return self._listening
        revision = self.revision()
        if revision != self._seen_revision:
            with self._lock:
                self._cache.clear()
                self._generation += 1
                self._seen_revision = revision
        return True

    def role_of(self, organization: str, name: str) -> str | None:
        """The role of a principal's keys (one per principal: `create` keeps it so), None for
        a name never given a key."""
        rows = self.store.query(
            "SELECT role FROM {api_keys} WHERE organization = %s AND principal = %s LIMIT 1",
            [organization, name],
        )
        return rows[0]["role"] if rows else None

    def is_principal(self, organization: str, name: str) -> bool:
        """Whether `name` has ever been given a key in the organization."""
        return bool(
            self.store.query(
                "SELECT 1 AS found FROM {api_keys} WHERE organization = %s AND principal = %s"
                " LIMIT 1",
                [organization, name],
            )
        )


def key_hash(key: str) -> str:
    """Keys are 192 random bits, so a plain digest cannot be reversed by guessing."""
    return hashlib.sha256(key.encode()).hexdigest()
