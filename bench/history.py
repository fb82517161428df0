"""Loading a large history into a Titen store quickly, in-process, before a server starts.

Driving 1,000,000 events through HTTP would take longer than the whole benchmark (one request,
a few transactions and a projection commit per lease). Instead this drives the real domain
in-process: the Lease aggregate's own commands (`acquire`, `release`) record genuine events,
and `Titen.save` stores them, many at a time:

- the resource with a long history is one aggregate on which N leases are acquired and
  released in memory, saved every `batch` leases (2 x batch events per transaction); the
  application takes its snapshots every 100 events as it would online;
- unreleased leases and filler history are `batch` new aggregates per `save` (one
  transaction each);
- the projections are then caught up in-process (`Projector.catch_up`, the server's own
  code path, 500 events per transaction), so the server starts with its read models current
  and no request pays for the backlog. On PostgreSQL those transactions run in psycopg's
  pipeline mode for this bulk load only (the same statements, sent without waiting for each
  reply; a read such as a tracking claim still waits): a backlog of a million events is
  otherwise a few thousand round trips per batch.

The result is the same store the API would have produced (same events, snapshots, tracking
and lease_index rows), written in minutes instead of hours.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from titen.domain.ids import LEASE, new_id
from titen.domain.lease import Lease
from titen.service.bootstrap import Services

RESOURCE_TYPE = "bench"
Progress = Callable[[str], None]


def event_count(services: Services) -> int:
    """How many domain events the notification log holds."""
    return services.app.recorder.max_notification_id() or 0


def load_long_history(
    services: Services,
    *,
    organization: str,
    holder: str,
    resource_id: str,
    leases: int,
    batch: int,
    progress: Progress,
) -> None:
    """One resource with `leases` earlier leases, each acquired and released (all ended)."""
    app, clock = services.app, services.clock
    keys = app.resource_keys
    lease = Lease(
        keys.of(organization, RESOURCE_TYPE, resource_id),
        organization,
        RESOURCE_TYPE,
        resource_id,
        timestamp=clock.now(),
    )
    started = time.monotonic()
    for done in range(1, leases + 1):
        now = clock.now()
        term = lease.acquire(
            lease_id=new_id(LEASE), holder=holder, purpose="history", now=now, ttl_seconds=600
        )
        lease.release(lease_id=term.lease_id, by=holder, as_operator=False, now=now)
        if done % batch == 0 or done == leases:
            app.save(lease)
        if done % (batch * 20) == 0:
            progress(f"  {done:,} earlier leases on {resource_id} ({_rate(done, started)})")


def load_unreleased(
    services: Services,
    *,
    organization: str,
    holder: str,
    count: int,
    batch: int,
    progress: Progress,
) -> None:
    """`count` resources, each holding one unreleased lease that expires in a day."""
    app, clock = services.app, services.clock
    keys = app.resource_keys
    pending: list[Lease] = []
    started = time.monotonic()
    for done in range(1, count + 1):
        resource = (organization, RESOURCE_TYPE, f"unreleased-{done}")
        now = clock.now()
        lease = Lease(keys.of(*resource), *resource, timestamp=now)
        lease.acquire(
            lease_id=new_id(LEASE), holder=holder, purpose="history", now=now, ttl_seconds=86_400
        )
        pending.append(lease)
        if len(pending) == batch or done == count:
            app.save(*pending)
            pending.clear()
        if done % (batch * 20) == 0:
            progress(f"  {done:,} unreleased leases ({_rate(done, started)})")


def fill_events(
    services: Services,
    *,
    organization: str,
    holder: str,
    until: int,
    batch: int,
    progress: Progress,
) -> None:
    """Add resources with one acquired-and-released lease each (3 events) until the log
    holds at least `until` events."""
    app, clock = services.app, services.clock
    keys = app.resource_keys
    have = event_count(services)
    number = 0
    started = time.monotonic()
    while have < until:
        pending = []
        for _ in range(min(batch, (until - have + 2) // 3)):
            number += 1
            resource = (organization, RESOURCE_TYPE, f"filler-{number}")
            now = clock.now()
            lease = Lease(keys.of(*resource), *resource, timestamp=now)
            term = lease.acquire(
                lease_id=new_id(LEASE), holder=holder, purpose="history", now=now, ttl_seconds=600
            )
            lease.release(lease_id=term.lease_id, by=holder, as_operator=False, now=now)
            pending.append(lease)
        recordings = app.save(*pending)
        have = recordings[-1].notification.id
        if number % (batch * 50) < batch:
            progress(f"  {have:,} events in the store ({_rate(number * 3, started)})")


def project(services: Services, progress: Progress) -> None:
    """Bring every projection up to the end of the log, as the server's poll would."""
    started = time.monotonic()
    with _pipelined(services):
        services.projector.catch_up()
    position = min(services.projector.positions().values())
    progress(f"  projections caught up to {position:,} in {_since(started)}")


@contextlib.contextmanager
def _pipelined(services: Services) -> Iterator[None]:
    """While loading, run the view store's PostgreSQL write transactions in pipeline mode."""
    datastore = services.store.datastore
    if services.database.kind != "postgres":
        yield
        return
    original = datastore.transaction

    @contextlib.contextmanager
    def transaction(*, commit: bool = False) -> Iterator[Any]:
        with (
            datastore.get_connection() as conn,
            conn.pipeline(),
            conn.transaction(force_rollback=not commit),
        ):
            yield _CursorPerStatement(conn)

    datastore.transaction = transaction
    try:
        yield
    finally:
        datastore.transaction = original


def _rate(events: int, started: float) -> str:
    return f"{events / max(time.monotonic() - started, 1e-9):,.0f}/s"


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


class _CursorPerStatement:
    """A cursor for pipeline mode: each statement gets its own psycopg cursor, so fetching the
    result of one (which makes psycopg wait for it) is never confused with a later one's."""

    def __init__(self, conn: Any):
        self._conn = conn
        self._last: Any = None

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        self._last = self._conn.cursor()
        return self._last.execute(query, params, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._last, name)
