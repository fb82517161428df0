"""The SQL of the delivery mechanism's two tables: `consumers` (one row per webhook or relay:
its position in the public event log, its claim and its retry state) and `delivery_attempts`
(the attempts kept per consumer). Every statement on them is here; what to write, and when, is
decided by service/delivery.py.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from titen.projections.store import Row, ViewStore, Writer
from titen.service.consumers import ACTIVE, Attempt, Consumer

Statement = tuple[str, list[Any]]

CLAIM_SECONDS = 10.0
"""A claim lasts this long past its owner's last heartbeat: how soon a killed process's
consumers are taken over."""
KEPT_ATTEMPTS = 1000
"""Attempts kept per consumer; older ones are pruned as new ones are recorded."""
LET_GO = (
    "%s OR (%s AND NOT EXISTS (SELECT 1 FROM {event_log} e WHERE e.position > %s"
    " AND ({consumers}.organization IS NULL OR e.organization = {consumers}.organization)))"
)
"""When a record lets go of the claim: after a failure, or when told it is done and no event
has been published after the new position (of the consumer's organization, if it has one)."""
INSERT = (
    "INSERT INTO {consumers} (name, kind, organization, position, status, failures,"
    " next_attempt_at, delivered, recorded) VALUES (%s, %s, %s, %s, %s, 0, 0, 0, 0)"
)
DUE = (
    "SELECT name FROM {consumers} c WHERE kind = %s AND status = %s"
    " AND next_attempt_at <= %s AND (claimed_until IS NULL OR claimed_until < %s)"
    " AND EXISTS (SELECT 1 FROM {event_log} e WHERE e.organization = c.organization"
    " AND e.position > c.position)"
)
ORDER = " ORDER BY next_attempt_at LIMIT 1"
"""DUE picks the due, unclaimed consumer of a kind with events waiting that waited longest."""
SCHEMA = [
    "CREATE TABLE IF NOT EXISTS {consumers} ("
    " name TEXT PRIMARY KEY, kind TEXT NOT NULL, organization TEXT,"
    " position BIGINT NOT NULL, status TEXT NOT NULL, failures INTEGER NOT NULL,"
    " next_attempt_at DOUBLE PRECISION NOT NULL, claimed_by TEXT,"
    " claimed_until DOUBLE PRECISION, delivered BIGINT NOT NULL, recorded BIGINT NOT NULL,"
    " last_error TEXT)",
    "CREATE INDEX IF NOT EXISTS consumers_due ON {consumers} (kind, status, next_attempt_at)",
    "CREATE TABLE IF NOT EXISTS {delivery_attempts} ("
    " consumer TEXT NOT NULL, seq BIGINT NOT NULL, event_id TEXT NOT NULL,"
    " attempt INTEGER NOT NULL, attempted_at TEXT NOT NULL, status_code INTEGER, error TEXT,"
    " duration_ms INTEGER NOT NULL, response_excerpt TEXT, PRIMARY KEY (consumer, seq))",
]


def create_tables(store: ViewStore) -> None:
    """Create both tables if they are missing (bootstrap does, while migrating)."""
    with store.writing() as writer:
        for statement in SCHEMA:
            writer.execute(statement)


@dataclass(frozen=True)
class Progress:
    """What one record saves of a consumer's row."""

    position: int
    failures: int
    status: str
    next_attempt_at: float
    delivered: int
    """Events handed over by this record (added to the consumer's count)."""
    last_error: str | None


class ConsumerTable:
    """The two tables, read and written on behalf of one process: `owner` names its claims."""

    def __init__(self, store: ViewStore):
        self.store = store
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"

    def backlog(self, kind: str) -> dict[str, int]:
        """Published events after each consumer of `kind`'s position, by consumer: what it has
        still to hand over, or skip (its filter is not applied here, so this is an upper bound).
        """
        rows = self.store.query(
            "SELECT c.name, COUNT(e.position) AS waiting FROM {consumers} c"
            " LEFT JOIN {event_log} e ON e.position > c.position"
            " AND (c.organization IS NULL OR e.organization = c.organization)"
            " WHERE c.kind = %s GROUP BY c.name",
            [kind],
        )
        return {row["name"]: int(row["waiting"]) for row in rows}

    def add(
        self, writer: Writer, name: str, kind: str, organization: str | None, position: int
    ) -> None:
        """A new consumer that starts after `position`, inside the caller's transaction."""
        writer.execute(INSERT, [name, kind, organization, position, ACTIVE])

    def ensure(self, name: str, kind: str, organization: str | None, position: int) -> None:
        """Add the consumer unless it exists (a named relay resumes from its stored position)."""
        with self.store.writing() as writer:
            writer.execute(
                INSERT + " ON CONFLICT (name) DO NOTHING",
                [name, kind, organization, position, ACTIVE],
            )

    def remove(self, writer: Writer, name: str) -> None:
        writer.execute("DELETE FROM {delivery_attempts} WHERE consumer = %s", [name])
        writer.execute("DELETE FROM {consumers} WHERE name = %s", [name])

    def enable(self, writer: Writer, name: str) -> None:
        """Make a failing consumer active again, its head event due now with a fresh schedule."""
        writer.execute(
            "UPDATE {consumers} SET status = %s, failures = 0, next_attempt_at = 0 WHERE name = %s",
            [ACTIVE, name],
        )

    def consumers(self, names: Sequence[str]) -> dict[str, Consumer]:
        if not names:
            return {}
        marks = ", ".join(["%s"] * len(names))
        rows = self.store.query(f"SELECT * FROM {{consumers}} WHERE name IN ({marks})", names)
        return {row["name"]: as_consumer(row) for row in rows}

    def attempts(self, name: str, before: int | None, limit: int) -> list[tuple[int, Attempt]]:
        """A consumer's recorded attempts, newest first, each with its sequence number."""
        statement = "SELECT * FROM {delivery_attempts} WHERE consumer = %s"
        params: list[Any] = [name]
        if before is not None:
            statement += " AND seq < %s"
            params.append(before)
        rows = self.store.query(statement + " ORDER BY seq DESC LIMIT %s", [*params, limit])
        return [(row["seq"], _attempt(row)) for row in rows]

    def claim_next(self, kind: str, now: float, busy: Sequence[str] = ()) -> Consumer | None:
        """Claim a due, unclaimed consumer of `kind` with events waiting, if there is one, of
        an organization not named in `busy`.

        One statement picks and claims it. On PostgreSQL the pick skips consumers that another
        worker's claim has locked at that instant, so workers woken together each take a
        different one (or none) without queueing behind each other's row locks. On SQLite a
        read looks first, so that an idle worker never takes the database's write lock."""
        due = DUE
        if busy:
            due += f" AND c.organization NOT IN ({', '.join(['%s'] * len(busy))})"
        due += ORDER
        picking = [kind, ACTIVE, now, now, *busy]
        if self.store.single_writer and not self.store.query(due, picking):
            return None
        rows = self.store.change(
            "UPDATE {consumers} SET claimed_by = %s, claimed_until = %s"
            f" WHERE name = ({due}{self.store.skip_locked}) AND status = %s"
            " AND next_attempt_at <= %s AND (claimed_until IS NULL OR claimed_until < %s)"
            " RETURNING *",
            [self.owner, now + CLAIM_SECONDS, *picking, ACTIVE, now, now],
        )
        return as_consumer(rows[0]) if rows else None

    def claim(self, name: str, now: float) -> Consumer | None:
        """Claim one consumer if it is active, due, and nobody holds it (this process's other
        workers included: the heartbeat keeps this process's claims from ever running out)."""
        rows = self.store.change(
            "UPDATE {consumers} SET claimed_by = %s, claimed_until = %s"
            " WHERE name = %s AND status = %s AND next_attempt_at <= %s"
            " AND (claimed_until IS NULL OR claimed_until < %s) RETURNING *",
            [self.owner, now + CLAIM_SECONDS, name, ACTIVE, now, now],
        )
        return as_consumer(rows[0]) if rows else None

    def release(self, name: str) -> None:
        self.store.change(
            "UPDATE {consumers} SET claimed_by = NULL, claimed_until = NULL"
            " WHERE name = %s AND claimed_by = %s",
            [name, self.owner],
        )

    def extend(self, now: float) -> None:
        """Extend every claim this process holds."""
        self.store.change(
            "UPDATE {consumers} SET claimed_until = %s WHERE claimed_by = %s",
            [now + CLAIM_SECONDS, self.owner],
        )

    def record(
        self,
        consumer: str,
        progress: Progress,
        attempt: Attempt | None,
        *,
        let_go: bool,
        done: bool,
    ) -> Row | None:
        """Save a consumer's `progress` and keep the attempt, if the claim still holds; the row
        as saved, or None when it does not. The claim is let go of when `let_go`, and when `done`
        if no event has been published after the new position since."""
        update: Statement = (
            "UPDATE {consumers} SET position = %s, failures = %s, status = %s,"
            " next_attempt_at = %s, delivered = delivered + %s, recorded = recorded + %s,"
            f" last_error = %s, claimed_by = CASE WHEN {LET_GO} THEN NULL ELSE claimed_by"
            f" END, claimed_until = CASE WHEN {LET_GO} THEN NULL ELSE claimed_until END"
            " WHERE name = %s AND claimed_by = %s RETURNING *",
            [
                progress.position,
                progress.failures,
                progress.status,
                progress.next_attempt_at,
                progress.delivered,
                1 if attempt else 0,
                progress.last_error,
                *(letting := [let_go, done, progress.position]),
                *letting,
                consumer,
                self.owner,
            ],
        )
        if attempt is None:
            rows = self.store.together([update])[0]
        else:
            keep, prune = self._keeping(consumer, attempt)
            rows = self.store.together([keep, update, prune])[1]
        return rows[0] if rows else None

    def _keeping(self, name: str, attempt: Attempt) -> tuple[Statement, Statement]:
        """The statements that keep an attempt (before the update that counts it: numbered
        next, kept only if the claim holds) and prune the oldest (after it). Each reads what
        it needs from the consumer's row, so they go to the database with the update at once."""
        return (
            (
                "INSERT INTO {delivery_attempts} SELECT name, recorded + 1, %s, %s, %s, %s, %s,"
                " %s, %s FROM {consumers} WHERE name = %s AND claimed_by = %s",
                [
                    attempt.event_id,
                    attempt.attempt,
                    attempt.attempted_at,
                    attempt.status_code,
                    attempt.error,
                    attempt.duration_ms,
                    attempt.response_excerpt,
                    name,
                    self.owner,
                ],
            ),
            (
                "DELETE FROM {delivery_attempts} WHERE consumer = %s"
                " AND seq <= (SELECT recorded FROM {consumers} WHERE name = %s) - %s",
                [name, name, KEPT_ATTEMPTS],
            ),
        )


def as_consumer(row: Row) -> Consumer:
    return Consumer(
        name=row["name"],
        kind=row["kind"],
        organization=row["organization"],
        position=int(row["position"]),
        status=row["status"],
        failures=int(row["failures"]),
        next_attempt_at=float(row["next_attempt_at"]),
        delivered=int(row["delivered"]),
        last_error=row["last_error"],
    )


def _attempt(row: Row) -> Attempt:
    return Attempt(
        event_id=row["event_id"],
        attempt=row["attempt"],
        attempted_at=row["attempted_at"],
        status_code=row["status_code"],
        error=row["error"],
        duration_ms=row["duration_ms"],
        response_excerpt=row["response_excerpt"],
    )
