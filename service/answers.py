"""Stored answers of idempotent requests: what a keyed command answered, kept for 24 hours.

A command that carries an Idempotency-Key writes its answer in the same transaction as its
events (storage/inline.py), so the answer exists exactly when the events do. The row's primary
key is the key's whole scope: a second command reaching the insert with the same scope (the same
request run at once elsewhere) finds the row, stores nothing, and its caller replays the stored
answer. Like API keys it is a table beside the read models, not a read model: it records what
was answered, which the log does not hold, and `titen projections rebuild` leaves it alone.
Expired rows are deleted by the next keyed write (no sweeper thread), and never answered.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from titen.domain.clock import Clock
from titen.projections.store import ViewStore, Writer
from titen.storage.inline import RowExists

KEPT_FOR = timedelta(hours=24)


@dataclass(frozen=True)
class Scope:
    """Whose key it is and for what: one key on two different paths is two keys."""

    organization: str
    principal: str
    method: str
    path: str
    key: str


@dataclass(frozen=True)
class Answer:
    fingerprint: str
    """sha256 of the request body as parsed JSON (`fingerprint`)."""
    status: int
    body: str
    """The JSON text that was answered."""


@dataclass(frozen=True)
class Kept:
    """An answer to store with a command's events."""

    scope: Scope
    answer: Answer


class AlreadyAnswered(RowExists):
    """Another request with the same key stored its answer first; this command stored nothing."""


def fingerprint(body: Any) -> str:
    """The same for two bodies that parse to the same JSON, whatever their spacing or key order."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


class StoredAnswers:
    def __init__(self, store: ViewStore, clock: Clock):
        self.store = store
        self.clock = clock
        with store.writing() as writer:
            writer.execute(
                "CREATE TABLE IF NOT EXISTS {idempotent_answers} ("
                " organization TEXT NOT NULL, principal TEXT NOT NULL, method TEXT NOT NULL,"
                " path TEXT NOT NULL, idempotency_key TEXT NOT NULL,"
                " fingerprint TEXT NOT NULL, status INTEGER NOT NULL, body TEXT NOT NULL,"
                " expires_at BIGINT NOT NULL,"
                " PRIMARY KEY (organization, principal, method, path, idempotency_key))"
            )
            writer.execute(
                "CREATE INDEX IF NOT EXISTS idempotent_answers_expiry"
                " ON {idempotent_answers} (expires_at)"
            )

    def find(self, scope: Scope) -> Answer | None:
        """The unexpired answer stored under `scope`, if any, once the change it answered is as
        safe as when a first answer is given: on every synchronous standby (else NotReplicated,
        an unknown outcome, as the first answer may have been)."""
        rows = self.store.query(
            "SELECT fingerprint, status, body FROM {idempotent_answers}"
            " WHERE organization = %s AND principal = %s AND method = %s AND path = %s"
            " AND idempotency_key = %s AND expires_at > %s",
            [*_key(scope), _millis(self.clock.now())],
        )
        if not rows:
            return None
        self.store.confirm_replicated("the change this request's key answered was saved")
        return Answer(**rows[0])

    def write(self, cursor: Any, kept: Sequence[Kept]) -> None:
        """On the cursor of a command's transaction: purge expired answers, then store these.

        Raises AlreadyAnswered (rolling the whole transaction back) when one is there already.
        """
        self.write_in(Writer(self.store, cursor), kept)

    def write_in(self, writer: Writer, kept: Sequence[Kept]) -> None:
        """`write` in an open transaction of the store (a command that records no event)."""
        now = _millis(self.clock.now())
        writer.execute("DELETE FROM {idempotent_answers} WHERE expires_at <= %s", [now])
        expires_at = now + int(KEPT_FOR.total_seconds() * 1000)
        for item in kept:
            inserted = writer.fetchall(
                "INSERT INTO {idempotent_answers} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING RETURNING 1 AS inserted",
                [
                    *_key(item.scope),
                    item.answer.fingerprint,
                    item.answer.status,
                    item.answer.body,
                    expires_at,
                ],
            )
            if not inserted:
                raise AlreadyAnswered(item.scope.key)

    def count(self) -> int:
        """Rows stored, expired or not (for tests of the purge)."""
        return int(self.store.query("SELECT COUNT(*) AS n FROM {idempotent_answers}")[0]["n"])


def _key(scope: Scope) -> list[str]:
    return [scope.organization, scope.principal, scope.method, scope.path, scope.key]


def _millis(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)
