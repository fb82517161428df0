"""The delivery mechanism's round trips, on real databases: the record of the last hand-over
lets go of the claim, a claim skips a consumer another transaction holds, and a commit wakes
one idle worker, which wakes the next only when it found work."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from unittest.mock import patch

import pytest

from tests.support import FakeClock, eventually
from titen.domain.webhooks import RetrySchedule
from titen.projections.event_log import Published
from titen.service.bootstrap import Services, bootstrap
from titen.service.consumers import Consumer, Outcome
from titen.service.doorbell import Doorbell
from titen.service.workers import Workers

KIND = "test"
SCHEDULE = RetrySchedule((1,))


@dataclass
class Channel:
    sink: Sink

    def wants(self, event: Published) -> bool:
        return True

    def send(self, events: Sequence[Published], attempt: int) -> Outcome:
        self.sink.sent.extend(event.position for event in events)
        self.sink.during_send()
        return Outcome(delivered=len(events))


@dataclass
class Sink:
    """Takes one event per send, and may commit something while it sends."""

    kind: str = KIND
    batch: int = 1
    schedule: RetrySchedule = SCHEDULE
    sent: list[int] = field(default_factory=list)
    during_send: Callable[[], None] = lambda: None

    def open(self, consumer: Consumer) -> Channel:
        return Channel(self)


def acquire(services: Services, name: str) -> None:
    services.app.acquire_lease(
        organization="acme",
        holder="agent_a",
        resource_type="doc",
        resource_id=name,
        purpose="p",
        ttl_seconds=60,
    )


def add_consumer(services: Services, name: str) -> None:
    with services.store.writing() as writer:
        services.consumer_table.add(writer, name, KIND, "acme", 0)


def claimed_by(services: Services, name: str) -> str | None:
    rows = services.store.query("SELECT claimed_by FROM {consumers} WHERE name = %s", [name])
    return rows[0]["claimed_by"]


def test_the_record_of_the_last_event_lets_go_of_the_claim(services):
    add_consumer(services, "c1")
    acquire(services, "one")
    delivery = services.delivery
    consumer = delivery.claim_next(KIND)
    assert consumer is not None
    assert claimed_by(services, "c1") == services.consumer_table.owner
    sink = Sink()
    assert delivery.drain(consumer, sink, threading.Event()) is False  # nothing to release
    (event,) = services.event_log.read("acme", 0, (), 10)
    assert sink.sent == [event.position]
    assert claimed_by(services, "c1") is None
    assert services.consumer_table.consumers(["c1"])["c1"].position == event.position


def test_an_event_published_before_that_record_is_handed_over_under_the_same_claim(services):
    add_consumer(services, "c1")
    acquire(services, "one")
    delivery = services.delivery
    sink = Sink()

    def publish_another() -> None:  # after the first read, before its record
        if len(sink.sent) < 3:
            acquire(services, f"more-{len(sink.sent)}")

    sink.during_send = publish_another
    consumer = delivery.claim_next(KIND)
    assert delivery.drain(consumer, sink, threading.Event()) is False
    published = [event.position for event in services.event_log.read("acme", 0, (), 10)]
    assert len(published) == 3
    assert sink.sent == published  # in log order, in one drain
    assert claimed_by(services, "c1") is None
    assert services.consumer_table.consumers(["c1"])["c1"].position == published[-1]


@pytest.fixture
def postgres_services(postgres_database: str) -> Iterator[Services]:
    services = bootstrap(postgres_database, FakeClock(), pool_size=5)
    yield services
    services.close()


def test_a_claim_skips_a_consumer_whose_row_another_transaction_holds(postgres_services):
    services = postgres_services
    for name in ("c1", "c2"):
        add_consumer(services, name)
    acquire(services, "one")
    claimed: list[Consumer | None] = []
    with services.store.writing() as other:
        other.execute("SELECT name FROM {consumers} WHERE name = %s FOR UPDATE", ["c1"])
        claiming = threading.Thread(
            target=lambda: claimed.append(services.delivery.claim_next(KIND))
        )
        claiming.start()
        claiming.join(timeout=10)  # it would wait for this transaction if it did not skip
        assert not claiming.is_alive()
    assert [consumer.name for consumer in claimed] == ["c2"]


def test_a_ring_wakes_one_idle_worker_not_all():
    doorbell = Doorbell()
    woken: list[int] = []
    seen = doorbell.version()
    waiters = [
        threading.Thread(target=lambda: doorbell.wait_past(seen, 30) and woken.append(1))
        for _ in range(3)
    ]
    for waiter in waiters:
        waiter.start()
    eventually(lambda: len(doorbell._rung._waiters) == 3, "three idle workers")
    doorbell.ring()
    eventually(lambda: woken == [1], "one worker woken")
    assert len(doorbell._rung._waiters) == 2  # the others sleep until rung again
    doorbell.ring()
    doorbell.ring()
    for waiter in waiters:
        waiter.join(timeout=10)
    assert woken == [1, 1, 1]


def test_stopping_wakes_every_idle_worker_at_once():
    """A stop used to wait for each idle worker to sleep out its poll (a quarter to half a
    second of every server's exit); now it wakes them, and they see they are stopping."""
    sink = SimpleNamespace(kind="webhook")
    with patch("titen.service.workers.IDLE_POLL_SECONDS", 3600):
        workers = Workers(None, sink, Doorbell(), 3, claim=lambda: None)  # type: ignore[arg-type]
        workers.start()
        eventually(lambda: len(workers.signal._rung._waiters) == 3, "three idle workers")
        workers.stop(timeout=10)
    assert not any(thread.is_alive() for thread in workers._threads)


def test_idle_workers_make_no_claims_while_nothing_is_wanted():
    """With no enabled webhook, idle workers claimed every 0.25 s each (32 queries a second
    from an idle server); now they wait, and are woken when one appears."""
    claims: list[int] = []
    wanted = [False]
    sink = SimpleNamespace(kind="webhook")
    with patch("titen.service.workers.QUIET_POLL_SECONDS", 3600):
        workers = Workers(
            None,  # type: ignore[arg-type]
            sink,  # type: ignore[arg-type]
            Doorbell(),
            2,
            claim=lambda: claims.append(1),  # type: ignore[arg-type,func-returns-value]
            wanted=lambda: wanted[0],
        )
        workers.start()
        eventually(lambda: len(workers.signal._rung._waiters) == 2, "two idle workers")
        assert claims == []
        wanted[0] = True
        workers.signal.ring_all()
        eventually(lambda: len(claims) >= 2, "both workers claiming")
        workers.stop(timeout=10)
