"""One delivery mechanism for everything that pushes the committed log downstream.

Webhook subscriptions and the NATS relay are both *consumers*: a row holding a durable position
in the public event log, a claim, and a retry state. A worker claims a due consumer (the claim
names its owner and expires unless its heartbeat extends it, so a dead process's consumers are
taken over), hands the events after the position to a sink in log order, and records the new
position in one transaction that still requires the claim. A failed hand-over is retried on the
sink's schedule and holds back only that consumer. Delivery is at least once: a crash between
the sink's success and the record repeats the hand-over. Each step is one round trip, since
latency is mostly waiting on them. Types in service/consumers.py, SQL in
service/consumer_table.py, the wake-up in service/doorbell.py, threads in service/workers.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from titen.projections.event_log import EventLog, Published
from titen.service.consumer_table import ConsumerTable, Progress, as_consumer
from titen.service.consumers import ACTIVE, FAILING, Attempt, Consumer, Outcome, Sink

log = logging.getLogger("titen.delivery")

SCAN_BATCH = 200


class Delivery:
    """The claim, drain, record and retry steps every sink shares, over the consumer table."""

    def __init__(self, table: ConsumerTable, log: EventLog, now: Callable[[], float] = time.time):
        self.table = table
        self.log = log
        self.now = now
        self._held: dict[str, str | None] = {}
        """The consumers this process's workers hold, with their organizations: the heartbeat
        writes nothing while there are none, and a claim skips an organization holding its cap."""
        self._holding_lock = threading.Lock()
        self._claiming = threading.Lock()

    def claim_next(self, kind: str, per_organization: int | None = None) -> Consumer | None:
        """Claim a due, unclaimed consumer of `kind` with events waiting, if there is one, of
        an organization whose consumers this process holds fewer than `per_organization` of.

        The cap keeps one organization's slow receivers from taking every worker; claims are
        made one at a time in a process (a ring wakes one worker at a time anyway), so the
        count a claim checks is the count it changes."""
        with self._claiming:
            busy = self._busy(per_organization)
            return self._claimed(self.table.claim_next(kind, self.now(), busy))

    def _busy(self, per_organization: int | None) -> list[str]:
        """The organizations at their cap of consumers held here."""
        if per_organization is None:
            return []
        with self._holding_lock:
            held = Counter(org for org in self._held.values() if org is not None)
        return sorted(org for org, count in held.items() if count >= per_organization)

    def claim(self, name: str) -> Consumer | None:
        """Claim one consumer if it is active, due, and nobody holds it (this process's other
        workers included: the heartbeat keeps this process's claims from ever running out)."""
        return self._claimed(self.table.claim(name, self.now()))

    def _claimed(self, consumer: Consumer | None) -> Consumer | None:
        """The consumer a claim returned, counted among this process's claims."""
        if consumer is not None:
            with self._holding_lock:
                self._held[consumer.name] = consumer.organization
        return consumer

    def release(self, name: str) -> None:
        """Let go of a claim a worker still holds (drain says whether it does)."""
        self._let_go(name)
        self.table.release(name)

    def _let_go(self, name: str) -> None:
        with self._holding_lock:
            self._held.pop(name, None)

    def heartbeat(self) -> None:
        """Extend every claim this process holds (no write at all while it holds none)."""
        with self._holding_lock:
            if not self._held:
                return
        self.table.extend(self.now())

    def drain(self, consumer: Consumer, sink: Sink, stop: threading.Event) -> bool:
        """Hand a claimed consumer's waiting events to the sink until none are left, one fails,
        the consumer goes away or the claim is lost; whether the caller must still release it.

        The record of the last hand-over lets go of the claim when nothing is left after it
        and, after a failure, always: one round trip for both."""
        current = consumer
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
            recorded = self._record(current, sink, through, delivered, attempt, done=not events)
            if recorded is None:
                return False
            current = recorded
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
        progress = Progress(
            position=max(through, consumer.position),
            failures=failures,
            status=status,
            next_attempt_at=due,
            delivered=delivered,
            last_error=error,
        )
        try:
            row = self.table.record(consumer.name, progress, attempt, let_go=failed, done=done)
        except Exception:
            if attempt is None or attempt.response_excerpt is None:
                raise
            # What the receiver answered is the one part of a record that comes from outside:
            # the hand-over is recorded without it rather than repeated because of it.
            log.exception(
                "recording %s's attempt failed; recording it without the answer", consumer.name
            )
            bare = replace(attempt, response_excerpt=None)
            row = self.table.record(consumer.name, progress, bare, let_go=failed, done=done)
        if row and status == FAILING:
            log.warning("%s failed its whole retry schedule; marked failing", consumer.name)
        if not row or row["claimed_by"] is None:
            self._let_go(consumer.name)
            return None
        return as_consumer(row)
