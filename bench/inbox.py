"""Inbox read cost: a caller with 10 pending handoffs in an organization that has a large number
of resolved handoffs (all addressed to that same caller, the worst case), against a caller with
10 pending handoffs in an organization that has none.

The resolved handoffs are real events: each is a Handoff aggregate created and accepted, mapped
by the application's own mapper and written straight to the event store in large batches (the
one shortcut: no per-command transaction). The inbox is then brought up to date by the real
projector, as a server would. Reads of both organizations are timed in alternating rounds, so
noise from other work on the machine falls on both alike.

    /tmp/v/bin/python bench/inbox.py                     # SQLite in a temporary directory
    /tmp/v/bin/python bench/inbox.py --database 'postgresql://postgres@127.0.0.1:5432/test?schema=bench_inbox'

The database must be empty (a PostgreSQL schema is created if missing; drop it afterwards).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import falcon.testing

from titen.api.rest.app import create_app
from titen.domain.clock import SystemClock
from titen.domain.handoff import Handoff
from titen.service.bootstrap import Services, bootstrap

BUSY = "acme"
QUIET = "quiet"
CALLER = "agent_reviewer"
SENDERS = [f"agent_sender_{n}" for n in range(10)]
PENDING = 10
CHUNK = 1_000  # larger single inserts can stall psycopg pipeline mode on PostgreSQL
ROUNDS = 10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", help="default: SQLite in a temporary directory")
    parser.add_argument("--resolved", type=int, default=1_000_000)
    parser.add_argument("--reads", type=int, default=2_000, help="timed reads per measurement")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database or f"sqlite:///{Path(tmp) / 'bench.db'}"
        services = bootstrap(url, SystemClock(), pool_size=4)
        try:
            return run(services, args.resolved, args.reads)
        finally:
            services.close()


def run(services: Services, resolved: int, reads: int) -> int:
    if services.app.recorder.max_notification_id():
        print("bench/inbox.py needs an empty database", file=sys.stderr)
        return 2
    client = falcon.testing.TestClient(create_app(services))
    callers = {org: add_pending(services, org) for org in (BUSY, QUIET)}
    print(f"backend: {services.database.kind}; each caller has {PENDING} pending handoffs")
    report("empty log", measure(services, client, callers, reads))

    started = time.perf_counter()
    load_resolved(services, resolved)
    loaded = time.perf_counter()
    services.projector.catch_up()
    projected = time.perf_counter()
    print(
        f"loaded {resolved:,} resolved handoffs in {BUSY} ({2 * resolved:,} events) in"
        f" {loaded - started:.0f} s; projected in {projected - loaded:.0f} s"
    )
    if services.database.kind == "sqlite":
        report(f"{resolved:,} resolved", measure(services, client, callers, reads))
        return 0
    report(f"{resolved:,} resolved, no VACUUM", measure(services, client, callers, reads))
    vacuum(services)
    report(f"{resolved:,} resolved, VACUUMed", measure(services, client, callers, reads))
    return 0


def add_pending(services: Services, org: str) -> str:
    """The caller's key, after PENDING handoffs to it through the real command."""
    key = services.keys.create(org, CALLER, "agent")
    for n in range(PENDING):
        services.keys.create(org, SENDERS[n], "agent")
        committed = services.app.create_handoff(
            organization=org,
            from_principal=SENDERS[n],
            to_principal=CALLER,
            subject_id=f"user_{n}",
            context_id=None,
            checkpoint_id=f"ckpt_{n}",
            message="Smoke passed, needs approval to promote.",
            is_principal=lambda name: True,
        )
        services.projector.catch_up(committed.position)
    return key


def load_resolved(services: Services, count: int) -> None:
    """Append `count` created-then-accepted handoffs to the log, CHUNK aggregates a batch."""
    app = services.app
    now = datetime.now(UTC)
    for start in range(0, count, CHUNK):
        stored = []
        for n in range(start, min(start + CHUNK, count)):
            handoff = Handoff(
                id=uuid4(),
                organization=BUSY,
                from_principal=SENDERS[n % len(SENDERS)],
                to_principal=CALLER,
                subject_id=f"user_{n % 1000}",
                context_id=None,
                checkpoint_id=None,
                message="done",
                created_at=now,
            )
            handoff.resolve(organization=BUSY, by=CALLER, accept=True, now=now)
            stored += [app.mapper.to_stored_event(e) for e in handoff.collect_events()]
        app.recorder.insert_events(stored)


def vacuum(services: Services) -> None:
    """PostgreSQL keeps deleted inbox rows' index entries until VACUUM; autovacuum does it when
    enabled (projections/inbox.py asks for it after 1,000 deletions), here it is done at once."""
    import psycopg

    table = services.store.sql("{handoff_inbox}")
    with psycopg.connect(services.database.conninfo(), autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {table}")


def measure(
    services: Services, client: falcon.testing.TestClient, callers: dict[str, str], reads: int
) -> dict[tuple[str, str], list[float]]:
    """Microseconds per read for each organization's caller: a whole GET /v1/handoffs, and
    the inbox query alone; ROUNDS alternating rounds of reads / ROUNDS calls each."""
    calls: dict[tuple[str, str], Callable[[], None]] = {}
    for org, key in callers.items():
        calls[(org, "GET /v1/handoffs")] = http_read(client, key)
        calls[(org, "inbox query")] = query_read(services, org)
    spent: dict[tuple[str, str], list[float]] = {name: [] for name in calls}
    for call in calls.values():  # warm caches and the connection pool
        for _ in range(100):
            call()
    for _ in range(ROUNDS):
        for name, call in calls.items():
            for _ in range(reads // ROUNDS):
                started = time.perf_counter()
                call()
                spent[name].append((time.perf_counter() - started) * 1e6)
    return spent


def http_read(client: falcon.testing.TestClient, key: str) -> Callable[[], None]:
    headers = {"authorization": f"Bearer {key}"}

    def call() -> None:
        result = client.simulate_get("/v1/handoffs", headers=headers)
        assert result.status_code == 200 and len(result.json["data"]["handoffs"]) == PENDING

    return call


def query_read(services: Services, org: str) -> Callable[[], None]:
    def call() -> None:
        assert len(services.inbox.pending(org, CALLER, after=0, limit=51)) == PENDING

    return call


def report(label: str, results: dict[tuple[str, str], list[float]]) -> None:
    for (org, name), spent in sorted(results.items(), key=lambda item: item[0][1]):
        spent.sort()
        p50 = statistics.median(spent)
        p99 = spent[int(len(spent) * 0.99) - 1]
        print(f"  {label:<32} {org:<6} {name:<17} p50 {p50:7.0f} µs   p99 {p99:7.0f} µs")


if __name__ == "__main__":
    sys.exit(main())
