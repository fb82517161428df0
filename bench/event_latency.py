"""Commit-to-stream latency of the event log (issue 4: p99 within 100 ms).

Starts real `titen serve` processes, opens Server-Sent Event streams on one, and commits leases
through another (on PostgreSQL: a second process on the same database, so delivery crosses
processes through LISTEN/NOTIFY; on SQLite: the same process, the embedded case). For each
event it records when the writer sent the POST and when its 201 came back, and when each
stream received the event. Commit happens between the two, so:
  - "from sent" over-states the latency (it includes the request before the commit),
  - "from answered" is the time after the writer already knew of the commit.
Usage: /tmp/v/bin/python bench/event_latency.py [--backend sqlite|postgres|both]
       [--events 300] [--rate 50] [--streams 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import (
    POSTGRES_URL,
    EventStreamReader,
    Http,
    Server,
    postgres_schema,
)
from titen.service.bootstrap import bootstrap


def measure(database: str, events: int, rate: float, streams: int, two_processes: bool) -> dict:
    services = bootstrap(database, pool_size=2)
    writer_key = services.keys.create("acme", "writer", "agent")
    # A key per stream (a principal holds only so many: --max-subscribers-per-principal), of a
    # dispatcher: an agent's stream carries only the events it is party to.
    reader_keys = [services.keys.create("acme", f"reader{n}", "dispatcher") for n in range(streams)]
    services.close()
    reading = Server(database)
    writing = Server(database) if two_processes else reading
    try:
        received: list[dict[str, float]] = [{} for _ in range(streams)]
        readers = [
            EventStreamReader(reading.url, reader_key, query="?after=latest")
            for reader_key in reader_keys
        ]

        def collect(n: int) -> None:
            count = 0
            for frame in readers[n].frames():
                if "data" in frame:
                    lease_id = json.loads(frame["data"])["data"]["lease_id"]
                    received[n][lease_id] = time.perf_counter()
                    count += 1
                    if count == events:
                        return

        threads = [threading.Thread(target=collect, args=(n,)) for n in range(streams)]
        for thread in threads:
            thread.start()
        http = Http(writing.url, writer_key)
        sent: dict[str, tuple[float, float]] = {}
        for i in range(events):
            before = time.perf_counter()
            status, body = http.request(
                "POST",
                "/v1/leases",
                {
                    "resource_type": "bench",
                    "resource_id": f"r{i}",
                    "purpose": "p",
                    "ttl_seconds": 60,
                },
            )
            after = time.perf_counter()
            assert status == 201, body
            sent[body["data"]["lease_id"]] = (before, after)
            time.sleep(max(0.0, 1 / rate - (after - before)))
        for thread in threads:
            thread.join(timeout=30)
        for reader in readers:
            reader.close()
    finally:
        reading.stop()
        if writing is not reading:
            writing.stop()
    from_sent = [r[k] - sent[k][0] for r in received for k in r]
    from_answer = [r[k] - sent[k][1] for r in received for k in r]
    delivered = sum(len(r) for r in received)
    return {
        "delivered": f"{delivered}/{events * streams}",
        "from sent p50 ms": percentile(from_sent, 50),
        "from sent p99 ms": percentile(from_sent, 99),
        "from answered p50 ms": percentile(from_answer, 50),
        "from answered p99 ms": percentile(from_answer, 99),
    }


def percentile(values: list[float], pct: int) -> float:
    if not values:
        return float("nan")
    cut = statistics.quantiles(values, n=100, method="inclusive")
    return round(cut[pct - 1] * 1000, 1) if pct < 100 else round(max(values) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--rate", type=float, default=50, help="commits per second")
    parser.add_argument("--streams", type=int, default=10)
    args = parser.parse_args()
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            figures = measure(
                f"sqlite:///{tmp}/titen.db",
                args.events,
                args.rate,
                args.streams,
                two_processes=False,
            )
            print("sqlite, one process:", figures)
    if args.backend in ("postgres", "both"):
        print(f"postgres at {POSTGRES_URL}")
        with postgres_schema() as url:
            figures = measure(url, args.events, args.rate, args.streams, two_processes=True)
            print("postgres, written through another process:", figures)


if __name__ == "__main__":
    main()
