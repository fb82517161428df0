"""The database's clock checked in each command's transaction, on a real PostgreSQL: a save
whose instants are ahead of the server's clock_timestamp(), or stale, rolls back and the command
runs again on a fresh reading; a clock that keeps disagreeing answers 503 and stores nothing.

The clock given to bootstrap reads the real server and adds a skew to chosen answers, as a
process whose estimate went wrong would have it; a test's FakeClock is never checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import falcon.testing
import psycopg
import pytest

from tests.support import POSTGRES_URL, FakeClock, bearer
from titen.api.rest.app import create_app
from titen.domain.clock import Clock, parse_iso
from titen.service.bootstrap import Services, bootstrap
from titen.storage.clock import DatabaseClock
from titen.storage.outages import ClockDisagrees

ACQUIRE = {"resource_type": "deploy", "resource_id": "r", "purpose": "p", "ttl_seconds": 60}


def database_now() -> datetime:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0].astimezone(UTC)


class Skewed:
    """Reads the server's clock, adding the next of `skews` (seconds; 0 once they run out)."""

    def __init__(self, *skews: float):
        self.skews = list(skews)
        self.reads = 0

    def __call__(self) -> datetime:
        self.reads += 1
        skew = self.skews.pop(0) if self.skews else 0.0
        return database_now() + timedelta(seconds=skew)


@pytest.fixture
def opened(postgres_database: str) -> Iterator[Callable[[Clock], Services]]:
    """Opens the store with a clock (closed at the end)."""
    made: list[Services] = []

    def open_with(clock: Clock) -> Services:
        services = bootstrap(postgres_database, clock, pool_size=3)
        made.append(services)
        return services

    yield open_with
    for services in made:
        services.close()


def events(services: Services) -> int:
    """Events in the store (not the last position: a rolled-back insert uses up positions, as
    a lost race's does, though no reader ever sees one)."""
    return len(services.app.recorder.select_notifications(start=1, limit=100))


def test_a_save_ahead_of_the_database_is_refused_and_runs_again_on_a_fresh_reading(opened):
    read = Skewed(60)  # the first anchor is a minute ahead of the server
    services = opened(DatabaseClock(read))
    before = database_now()
    app = services.app

    committed = app.acquire_lease(
        organization="acme",
        holder="agent_a",
        resource_type="deploy",
        resource_id="r",
        purpose="p",
        ttl_seconds=60,
    )

    assert read.reads == 2  # the refusal dropped the anchor; the attempt ran again
    assert before <= committed.value.acquired_at <= database_now()
    assert events(services) == 2  # Registered and Acquired once: the refused save left none


@pytest.mark.parametrize("skew", [60, -60], ids=["ahead", "stale"])
def test_a_clock_that_keeps_disagreeing_answers_503_and_stores_nothing(opened, skew):
    read = Skewed(*[skew] * 10)
    services = opened(DatabaseClock(read))
    key = services.keys.create("acme", "agent_a", "agent")
    client = falcon.testing.TestClient(create_app(services))
    with pytest.raises(ClockDisagrees):
        services.app.acquire_lease(
            organization="acme",
            holder="agent_a",
            resource_type="deploy",
            resource_id="r",
            purpose="p",
            ttl_seconds=60,
        )

    answer = client.simulate_post("/v1/leases", json=ACQUIRE, headers=bearer(key))

    assert answer.status_code == 503, answer.text
    assert answer.json["error"]["code"] == "UNAVAILABLE"
    assert "clock" in answer.json["error"]["message"]
    assert answer.headers["retry-after"]
    assert events(services) == 0


def test_a_test_s_clock_is_not_checked_against_the_database(opened):
    services = opened(FakeClock(datetime(2020, 1, 1, tzinfo=UTC)))
    key = services.keys.create("acme", "agent_a", "agent")
    client = falcon.testing.TestClient(create_app(services))

    answer = client.simulate_post("/v1/leases", json=ACQUIRE, headers=bearer(key))

    assert answer.status_code == 201, answer.text
    assert parse_iso(answer.json["data"]["expires_at"]) == datetime(2020, 1, 1, 0, 1, tzinfo=UTC)


LEASE = {"resource_type": "deploy", "resource_id": "r", "purpose": "p", "ttl_seconds": 60}


def trailing(opened) -> Services:
    """A process whose estimate of the database's clock trails by half a second (its anchor
    read was slow), until a check of its own tightens it."""
    return opened(DatabaseClock(Skewed(-0.5)))


def test_an_acquire_right_after_a_release_on_a_node_that_trails_more_does_not_begin_first(opened):
    here = opened(DatabaseClock(Skewed()))
    held = here.app.acquire_lease(organization="acme", holder="agent_a", **LEASE).value
    released_at = here.app.release_lease(
        lease_key=here.app.resource_keys.of("acme", "deploy", "r"),
        lease_id=held.lease_id,
        by="agent_a",
        as_operator=False,
    ).value

    taken = trailing(opened).app.acquire_lease(organization="acme", holder="agent_b", **LEASE)

    assert taken.value.acquired_at >= released_at
    assert taken.value.fencing_token == 2


def test_a_resolve_on_a_node_that_trails_more_is_not_recorded_before_the_creation(opened):
    here = opened(DatabaseClock(Skewed()))
    created = here.app.create_handoff(
        organization="acme",
        from_principal="agent_a",
        to_principal="agent_b",
        subject_id="s",
        context_id=None,
        checkpoint_id=None,
        message=None,
        is_principal=lambda _: True,
    ).value

    resolved = trailing(opened).app.resolve_handoff(
        organization="acme", key=created.id, by="agent_b", accept=True
    )

    assert resolved.value.resolved_at is not None
    assert resolved.value.resolved_at >= created.created_at
