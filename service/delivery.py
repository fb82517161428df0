"""One delivery mechanism for everything that pushes the committed log downstream.

Webhook subscriptions and the NATS relay are both *consumers*: a row holding a durable position
in the public event log, a claim, and a retry state. A worker claims a due consumer (one process
at a time: the claim names its owner and expires unless the owner's heartbeat extends it, so a
killed process's consumers are taken over once the claim runs out), hands the events after the
position to a sink in log order, and records the new position (and the attempt, when the sink
keeps one) in one transaction that still requires the claim. A failed hand-over schedules the
next attempt on the sink's retry schedule; the position stays, so a failing event holds back the
later events of that consumer only. Delivery is therefore at least once: a crash between the
sink's success and the record repeats the hand-over after the claim expires.

Each step is one round trip to the database, since commit-to-delivery latency is mostly waiting
on them (docs/performance.md): a commit wakes one idle worker, which picks and claims a consumer
in one statement and wakes the next worker; the log is read once per drain; and the record, sent
in one pipeline, also lets go of the claim when nothing was published after it meanwhile.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import uuid4

from titen.domain.webhooks import RetrySchedule
from titen.projections.event_log import EventLog, Published
from titen.projections.store import Row, ViewStore, Writer

log = logging.getLogger("titen.delivery")

Statement = tuple[str, list[Any]]

ACTIVE, FAILING = "active", "failing"
CLAIM_SECONDS = 10.0
"""A claim lasts this long past its owner's last heartbeat: how soon a killed process's
consumers are taken over."""
HEARTBEAT_SECONDS = 2.0
IDLE_POLL_SECONDS = 0.25
"""How often an idle worker looks for retries that came due (new events wake it at once)."""
SCAN_BATCH = 200
LET_GO = (
    "%s OR (%s AND NOT EXISTS (SELECT 1 FROM {event_log} e WHERE e.position > %s"
    " AND ({consumers}.organization IS NULL OR e.organization = {consumers}.organization)))"
)
"""When a record lets go of the claim: after a failure, or when told it is done and no event
has been published after the new position (of the consumer's organization, if it has one)."""
KEPT_ATTEMPTS = 1000
"""Attempts kept per consumer; older ones are pruned as new ones are recorded."""


@dataclass(frozen=True)
class Consumer:
    name: str
    kind: str
    organization: str | None
    """The organization whose events it follows; None follows every organization."""
    position: int
    status: str
    failures: int
    """Failed attempts at the event at its head (0 once that event is handed over)."""
    next_attempt_at: float
    delivered: int
    last_error: str | None


@dataclass(frozen=True)
class Attempt:
    """One try at handing an event over, as GET /v1/webhooks/{id}/deliveries shows it."""

    event_id: str
    attempt: int
    attempted_at: str
    status_code: int | None
    error: str | None
    duration_ms: int
    response_excerpt: str | None


@dataclass(frozen=True)
class Outcome:
    delivered: int
    """How many of the offered events were handed over, from the first; fewer is a failure."""
    attempt: Attempt | None = None
    """The record to keep of this try, if the sink keeps one (its error says why it failed)."""


class Channel(Protocol):
    """A sink opened for one consumer, with the consumer's current settings."""

    def wants(self, event: Published) -> bool: ...

    def send(self, events: Sequence[Published], attempt: int) -> Outcome: ...


class Sink(Protocol):
    kind: str
    batch: int
    """Most events offered to one `send`."""
    schedule: RetrySchedule

    def open(self, consumer: Consumer) -> Channel | None:
        """A channel for the consumer, or None when it no longer exists."""
        ...


class Doorbell:
    """Wakes idle workers when events commit: rung by this process's commits and, on
    PostgreSQL, by the follower on every other process's (its NOTIFY). Workers also look again
    every IDLE_POLL_SECONDS, for retries that came due and for other SQLite processes' commits.

    A ring wakes one idle worker, and a worker that claims a consumer rings again for the next:
    a commit that makes k consumers due wakes k + 1 workers, each claiming at once, instead of
    every worker racing for the same few rows.
    """

    def __init__(self) -> None:
        self._rung = threading.Condition()
        self._version = 0

    def ring(self, *_: object) -> None:
        with self._rung:
            self._version += 1
            self._rung.notify()

    def version(self) -> int:
        return self._version

    def wait_past(self, version: int, timeout: float) -> bool:
        with self._rung:
            return self._rung.wait_for(lambda: self._version != version, timeout)


class Delivery:
    """The consumers table and the claim, record and retry steps every sink shares."""

    def __init__(self, store: ViewStore, log: EventLog, now: Callable[[], float] = time.time):
        self.store = store
        self.log = log
        self.now = now
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid4().hex[:8]}"
        self._holding = 0
        """Claims this process's workers hold: the heartbeat writes nothing while there are none."""
        self._holding_lock = threading.Lock()
        with store.writing() as writer:
            for statement in SCHEMA:
                writer.execute(statement)

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
        writer.execute(
            "INSERT INTO {consumers} (name, kind, organization, position, status, failures,"
            " next_attempt_at, delivered, recorded) VALUES (%s, %s, %s, %s, %s, 0, 0, 0, 0)",
            [name, kind, organization, position, ACTIVE],
        )

    def ensure(self, name: str, kind: str, organization: str | None, position: int) -> None:
        """Add the consumer unless it exists (a named relay resumes from its stored position)."""
        with self.store.writing() as writer:
            writer.execute(
                "INSERT INTO {consumers} (name, kind, organization, position, status, failures,"
                " next_attempt_at, delivered, recorded) VALUES (%s, %s, %s, %s, %s, 0, 0, 0, 0)"
                " ON CONFLICT (name) DO NOTHING",
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
        return {row["name"]: _consumer(row) for row in rows}

    def attempts(self, name: str, before: int | None, limit: int) -> list[tuple[int, Attempt]]:
        """A consumer's recorded attempts, newest first, each with its sequence number."""
        statement = "SELECT * FROM {delivery_attempts} WHERE consumer = %s"
        params: list[Any] = [name]
        if before is not None:
            statement += " AND seq < %s"
            params.append(before)
        rows = self.store.query(statement + " ORDER BY seq DESC LIMIT %s", [*params, limit])
        return [(row["seq"], _attempt(row)) for row in rows]

    def claim_next(self, kind: str) -> Consumer | None:
        """Claim a due, unclaimed consumer of `kind` with events waiting, if there is one.

        One statement picks and claims it. On PostgreSQL the pick skips consumers that another
        worker's claim has locked at that instant, so workers woken together each take a
        different one (or none) without queueing behind each other's row locks. On SQLite a
        read looks first, so that an idle worker never takes the database's write lock."""
        now = self.now()
        due = (
            "SELECT name FROM {consumers} c WHERE kind = %s AND status = %s"
            " AND next_attempt_at <= %s AND (claimed_until IS NULL OR claimed_until < %s)"
            " AND EXISTS (SELECT 1 FROM {event_log} e WHERE e.organization = c.organization"
            " AND e.position > c.position) ORDER BY next_attempt_at LIMIT 1"
        )
        picking = [kind, ACTIVE, now, now]
        if self.store.single_writer and not self.store.query(due, picking):
            return None
        rows = self.store.change(
            "UPDATE {consumers} SET claimed_by = %s, claimed_until = %s"
            f" WHERE name = ({due}{self.store.skip_locked}) AND status = %s"
            " AND next_attempt_at <= %s AND (claimed_until IS NULL OR claimed_until < %s)"
            " RETURNING *",
            [self.owner, now + CLAIM_SECONDS, *picking, ACTIVE, now, now],
        )
        return self._claimed(rows)

    def claim(self, name: str) -> Consumer | None:
        """Claim one consumer if it is active, due, and nobody holds it (this process's other
        workers included: the heartbeat keeps this process's claims from ever running out)."""
        now = self.now()
        rows = self.store.change(
            "UPDATE {consumers} SET claimed_by = %s, claimed_until = %s"
            " WHERE name = %s AND status = %s AND next_attempt_at <= %s"
            " AND (claimed_until IS NULL OR claimed_until < %s) RETURNING *",
            [self.owner, now + CLAIM_SECONDS, name, ACTIVE, now, now],
        )
        return self._claimed(rows)

    def _claimed(self, rows: list[Row]) -> Consumer | None:
        """The consumer a claim returned, counted among this process's claims."""
        if not rows:
            return None
        self._count(+1)
        return _consumer(rows[0])

    def release(self, name: str) -> None:
        """Let go of a claim a worker still holds (drain says whether it does)."""
        self._count(-1)
        self.store.change(
            "UPDATE {consumers} SET claimed_by = NULL, claimed_until = NULL"
            " WHERE name = %s AND claimed_by = %s",
            [name, self.owner],
        )

    def _count(self, change: int) -> None:
        with self._holding_lock:
            self._holding += change

    def heartbeat(self) -> None:
        """Extend every claim this process holds (no write at all while it holds none)."""
        with self._holding_lock:
            if not self._holding:
                return
        self.store.change(
            "UPDATE {consumers} SET claimed_until = %s WHERE claimed_by = %s",
            [self.now() + CLAIM_SECONDS, self.owner],
        )

    def drain(self, consumer: Consumer, sink: Sink, stop: threading.Event) -> bool:
        """Hand a claimed consumer's waiting events to the sink until none are left, one fails,
        the consumer goes away or the claim is lost; whether the caller must still release it.

        The record of the last hand-over lets go of the claim when nothing is left after it
        and, after a failure, always: one round trip for both."""
        current: Consumer | None = consumer
        events = self._after(consumer)
        while events and not stop.is_set():
            channel = sink.open(current)
            if channel is None:
                return True
            wanted = [event for event in events if channel.wants(event)]
            offered = wanted[: sink.batch]
            through, delivered, attempt = events[-1].position, 0, None
            if offered:
                outcome = channel.send(offered, current.failures + 1)
                if outcome.delivered < len(offered):
                    self._record_failure(current, sink, events, offered, outcome)
                    return False
                if len(wanted) > len(offered):
                    through = offered[-1].position
                delivered, attempt = outcome.delivered, outcome.attempt
            # What was read and is still ahead is handed over before the log is read again: a
            # sink taking one event per send would otherwise read (and decode) a whole scan
            # batch per event.
            events = [event for event in events if event.position > through]
            current = self._record(current, sink, through, delivered, attempt, done=not events)
            if current is None:
                return False
            if not events:
                events = self._after(current)
        return True

    def _record_failure(
        self,
        consumer: Consumer,
        sink: Sink,
        events: list[Published],
        offered: Sequence[Published],
        outcome: Outcome,
    ) -> None:
        """Save what was handed over before the event that failed, and when to try it again."""
        failed = offered[outcome.delivered].position
        through = max(
            (e.position for e in events if e.position < failed), default=consumer.position
        )
        self._record(consumer, sink, through, outcome.delivered, outcome.attempt, failed=True)

    def _after(self, consumer: Consumer) -> list[Published]:
        """The published events after the consumer's position, oldest first."""
        if consumer.organization is not None:
            return self.log.read(consumer.organization, consumer.position, (), SCAN_BATCH)
        return [event for _, event in self.log.tail(consumer.position, SCAN_BATCH)]

    def _record(
        self,
        consumer: Consumer,
        sink: Sink,
        through: int,
        delivered: int,
        attempt: Attempt | None,
        *,
        failed: bool = False,
        done: bool = False,
    ) -> Consumer | None:
        """Save the new position (and the attempt) if the claim still holds; the consumer as
        saved, or None when this worker no longer holds it: the claim was lost, the consumer
        removed, or the claim let go of here. It is let go of after a failure (the retry is
        claimed when due), and when `done` (nothing read is left) if no event has been
        published after the new position since (else the caller reads on, still holding it)."""
        failures, status, due, error = 0, ACTIVE, 0.0, None
        if failed:
            failures = consumer.failures + 1 if through == consumer.position else 1
            pause = sink.schedule.pause(failures)
            status = ACTIVE if pause is not None else FAILING
            due = self.now() + (pause or 0)
            error = attempt.error if attempt else "failed"
        position = max(through, consumer.position)
        update: Statement = (
            "UPDATE {consumers} SET position = %s, failures = %s, status = %s,"
            " next_attempt_at = %s, delivered = delivered + %s, recorded = recorded + %s,"
            f" last_error = %s, claimed_by = CASE WHEN {LET_GO} THEN NULL ELSE claimed_by"
            f" END, claimed_until = CASE WHEN {LET_GO} THEN NULL ELSE claimed_until END"
            " WHERE name = %s AND claimed_by = %s RETURNING *",
            [
                position,
                failures,
                status,
                due,
                delivered,
                1 if attempt else 0,
                error,
                *(let_go := [failed, done, position]),
                *let_go,
                consumer.name,
                self.owner,
            ],
        )
        if attempt is None:
            rows = self.store.together([update])[0]
        else:
            keep, prune = self._keeping(consumer.name, attempt)
            rows = self.store.together([keep, update, prune])[1]
        if rows and status == FAILING:
            log.warning("%s failed its whole retry schedule; marked failing", consumer.name)
        if not rows or rows[0]["claimed_by"] is None:
            self._count(-1)
            return None
        return _consumer(rows[0])

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


class Workers:
    """Threads that claim due consumers and drain them, plus the heartbeat for their claims."""

    def __init__(
        self,
        delivery: Delivery,
        sink: Sink,
        signal: Doorbell,
        count: int,
        claim: Callable[[], Consumer | None] | None = None,
    ):
        self.delivery = delivery
        self.sink = sink
        self.signal = signal
        self.claim = claim or (lambda: delivery.claim_next(sink.kind))
        self.stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, name=f"{sink.kind}-{i}", daemon=True)
            for i in range(count)
        ]
        self._threads.append(threading.Thread(target=self._beat, name="heartbeat", daemon=True))

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 15) -> None:
        """Finish what is in flight, release the claims, and return."""
        self.stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _work(self) -> None:
        while not self.stopping.is_set():
            try:
                seen = self.signal.version()
                consumer = self.claim()
                if consumer is None:
                    self.signal.wait_past(seen, IDLE_POLL_SECONDS)
                    continue
                self.signal.ring()  # another consumer may be due: wake the next worker
                held = True
                try:
                    held = self.delivery.drain(consumer, self.sink, self.stopping)
                finally:
                    if held:
                        self.delivery.release(consumer.name)
            except Exception:
                log.exception("%s delivery failed; retrying", self.sink.kind)
                self.stopping.wait(1)

    def _beat(self) -> None:
        while not self.stopping.wait(HEARTBEAT_SECONDS):
            try:
                self.delivery.heartbeat()
            except Exception:
                log.exception("extending delivery claims failed; retrying")


def _consumer(row: Row) -> Consumer:
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
