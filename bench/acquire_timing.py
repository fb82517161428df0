"""What bench/streams.py and bench/slow_connections.py share: a store per backend, keys, the
machine's load, and the acquire latency one keyed client sees over one kept-alive connection.

Each of those benches compares the same acquire loop without and with some load on the server
(open streams, idle connections), measured before, during and after that load on the same
server, so a change in the machine's load between phases shows as a gap between the two
unloaded phases.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import POSTGRES_URL, postgres_schema
from titen.service.bootstrap import bootstrap


@contextmanager
def store(backend: str) -> Iterator[str]:
    """A fresh store: a temporary SQLite file, or a PostgreSQL schema of its own."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/titen.db"
    else:
        print(f"postgres at {POSTGRES_URL}")
        with postgres_schema() as url:
            yield url


def make_keys(database: str, wanted: list[tuple[str, str, str]]) -> list[str]:
    """One key per (organization, principal, role)."""
    services = bootstrap(database, pool_size=2)
    try:
        return [services.keys.create(org, principal, role) for org, principal, role in wanted]
    finally:
        services.close()


def acquire_seconds(port: int, key: str, count: int, tag: str) -> list[float]:
    """`count` acquires of distinct resources, one after another on one connection: each one's
    time from sending the request to having read the whole answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    took = []
    try:
        for n in range(count):
            body = json.dumps(
                {
                    "resource_type": "bench",
                    "resource_id": f"{tag}-{n}",
                    "purpose": "p",
                    "ttl_seconds": 60,
                }
            )
            began = time.perf_counter()
            conn.request("POST", "/v1/leases", body=body, headers=headers)
            response = conn.getresponse()
            answer = response.read()
            took.append(time.perf_counter() - began)
            assert response.status == 201, answer
    finally:
        conn.close()
    return took


def ms(values: list[float], pct: int) -> float:
    """The `pct`th percentile of durations in seconds, in milliseconds to one decimal."""
    cut = statistics.quantiles(values, n=100, method="inclusive")
    return round(cut[pct - 1] * 1000, 1)


def p50_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


def p99_ms(values: list[float]) -> float:
    return round(statistics.quantiles(values, n=100, method="inclusive")[98] * 1000, 2)


def load() -> str:
    """The machine's load averages and core count, to read the figures against."""
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def phase(label: str, took: list[float]) -> float:
    p50 = p50_ms(took)
    print(f"  {label}: acquire p50 {p50} ms, p99 {p99_ms(took)} ms ({len(took)} acquires)")
    return p50
