"""The store's secret: 32 random bytes made once, when a store is first opened by this release.

Every process of a store reads the same secret, so what it keys agrees across processes and
restarts: Lease aggregate ids (domain/lease.py `ResourceKeys`), sealed cursors (domain/cursors.py)
and MCP session ids (domain/mcp_sessions.py). It lives in a one-row table beside the read models,
not in the event log (configuration of the store, untouched by rebuilds), made under the store's
migration lock so processes starting together agree on one. The row also records, once, which
resource ids the store uses: keyed for an empty log, the unkeyed uuid5 for a store earlier
releases wrote, so a resource never gets a second aggregate (and a second holder). Losing the row
loses that decision: it is part of the store, backed up with it (docs/security.md).
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from titen.domain.cursors import Cursors
from titen.domain.lease import UNKEYED, ResourceKeys
from titen.domain.mcp_sessions import SessionIds
from titen.projections.store import ViewStore

SECRET_BYTES = 32
KEYED = "hmac-sha256"
UNKEYED_UUID5 = "uuid5"


@dataclass(frozen=True)
class StoreSecret:
    secret: bytes
    resource_ids: str
    """KEYED or UNKEYED_UUID5: how this store derives resources' aggregate ids."""
    sealed_from: int
    """The log's last position when the secret was made: cursors handed out before then were
    unsealed (version 1) and are still accepted up to it (domain/cursors.py)."""

    def resource_keys(self) -> ResourceKeys:
        if self.resource_ids == UNKEYED_UUID5:
            return UNKEYED
        return ResourceKeys(self._derived("resource ids"))

    def cursors(self) -> Cursors:
        return Cursors(self._derived("cursors"), unsealed_until=self.sealed_from)

    def mcp_sessions(self) -> SessionIds:
        return SessionIds(self._derived("mcp sessions"))

    def _derived(self, purpose: str) -> bytes:
        """A key of its own for each use, so no use of the secret can help attack another."""
        return hmac.digest(self.secret, f"titen {purpose}".encode(), "sha256")


def open_secret(store: ViewStore, log_end: int) -> StoreSecret:
    """The store's secret, made now if it has none; `log_end` is the log's last position (0 for
    an empty log). Call it under the store's migration lock."""
    with store.writing() as writer:
        writer.execute(
            "CREATE TABLE IF NOT EXISTS {store_secret} ("
            " id INTEGER PRIMARY KEY CHECK (id = 1), secret TEXT NOT NULL,"
            " resource_ids TEXT NOT NULL, sealed_from BIGINT NOT NULL)"
        )
        writer.execute(
            "INSERT INTO {store_secret} VALUES (1, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
            [
                secrets.token_hex(SECRET_BYTES),
                UNKEYED_UUID5 if log_end else KEYED,
                log_end,
            ],
        )
        row = writer.fetchall("SELECT secret, resource_ids, sealed_from FROM {store_secret}")[0]
    return StoreSecret(bytes.fromhex(row["secret"]), row["resource_ids"], int(row["sealed_from"]))
