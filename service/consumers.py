"""What the delivery mechanism (service/delivery.py) and its sinks exchange: a consumer's row,
the record of one attempt, a hand-over's outcome, and the protocols a sink implements.

A module of its own so that sinks (webhooks, the NATS relay) and the API depend on these types
without importing the drain, the SQL or the worker threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from titen.domain.webhooks import RetrySchedule
from titen.projections.event_log import Published

ACTIVE, FAILING = "active", "failing"


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
