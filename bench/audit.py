"""The audit of a resource with a long history, and what it costs everyone else (issue 16).

A resource of organization `acme` gets `--terms` terms (10,000 by default), each superseding
the last: real events from the Lease aggregate's own commands, saved in-process 500 terms a
transaction (the application snapshots every 100 events, as online). Then, against a real
`titen serve` on that store (a temporary SQLite file, or a PostgreSQL schema dropped afterwards):

1. The first page of `GET /v1/audit/leases` (default `limit`): p50 latency and its size; a page
   of 500 terms deep in the history (the last); one old lease's `GET /v1/audit/leases/{id}`;
   and the whole history read page by page.
2. Another organization's acquire latency (p50/p99, one at a time, each on a new resource),
   alone, then while `--readers` clients each read acme's whole audit in a loop, following
   `next_cursor` (against a release without paging that is one unpaged request per reading).

    .venv/bin/python bench/audit.py [--backend sqlite|postgres|both] [--terms 10000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acquire_timing import ms, store

from tests.support import Http, Server, create_key
from titen.domain.clock import SystemClock
from titen.domain.ids import LEASE, new_id
from titen.domain.lease import Lease
from titen.service.bootstrap import bootstrap

RESOURCE = {"resource_type": "deploy", "resource_id": "busy"}
BATCH = 500
SAMPLES = 50
ACQUIRES = 200


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--terms", type=int, default=10_000)
    parser.add_argument("--readers", type=int, default=4)
    args = parser.parse_args()
    for backend in ["sqlite", "postgres"] if args.backend == "both" else [args.backend]:
        print(f"== {backend}: {args.terms:,} terms on one resource")
        with store(backend) as url:
            run(url, args)
    return 0


def run(url: str, args: argparse.Namespace) -> None:
    started = time.perf_counter()
    ids = load(url, args.terms)
    print(f"  loaded in {time.perf_counter() - started:.0f} s")
    ops = create_key(url, "acme", "ops", role="operator")
    agent = create_key(url, "quiet", "agent_quiet")
    server = Server(url, 8)
    try:
        http = Http(server.url, ops)
        first = timed(lambda: audit(http, RESOURCE))
        _, body = http.request("GET", "/v1/audit/leases?" + urlencode(RESOURCE))
        size = len(json.dumps(body).encode())
        print(
            f"  first page: p50 {ms(first, 50)} ms, {len(body['data']['terms'])} terms, ~{size:,} B"
        )
        if "next_cursor" in body["data"]:  # not against a release without paging
            deep = {**RESOURCE, "limit": 500, "cursor": cursor_before_last(http) or ""}
            print(f"  last page of 500: p50 {ms(timed(lambda: audit(http, deep)), 50)} ms")
        old = timed(lambda: http.request("GET", f"/v1/audit/leases/{ids[0]}"))
        print(f"  the first lease by its id: p50 {ms(old, 50)} ms")
        walk = time.perf_counter()
        pages = read_everything(http)
        print(f"  whole history, {pages} pages: {time.perf_counter() - walk:.2f} s")
        quiet = Http(server.url, agent)
        alone = acquires(quiet, "alone")
        with readers(server.url, ops, args.readers) as reads:
            busy = acquires(quiet, "busy")
        print(f"  (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        print(f"  quiet acquire alone: p50 {ms(alone, 50)} ms, p99 {ms(alone, 99)} ms")
        print(
            f"  quiet acquire with {args.readers} whole-history readers: p50 {ms(busy, 50)} ms,"
            f" p99 {ms(busy, 99)} ms ({reads[0]} pages read meanwhile)"
        )
    finally:
        server.stop()


def load(url: str, terms: int) -> list[str]:
    """`terms` terms on RESOURCE, each superseding the last; their lease ids, oldest first."""
    services = bootstrap(url, SystemClock(), pool_size=2)
    try:
        lease = Lease("acme", RESOURCE["resource_type"], RESOURCE["resource_id"])
        ids = []
        for n in range(terms):
            holding = lease.acquire(
                lease_id=new_id(LEASE),
                holder="agent_busy",
                purpose="bench",
                now=services.clock.now(),
                ttl_seconds=3600,
            )
            ids.append(holding.lease_id)
            if (n + 1) % BATCH == 0 or n + 1 == terms:
                services.app.save(lease)
        return ids
    finally:
        services.close()


def audit(http: Http, params: dict) -> dict:
    status, body = http.request("GET", "/v1/audit/leases?" + urlencode(params))
    assert status == 200, body
    return body["data"]


def cursor_before_last(http: Http) -> str | None:
    """The cursor that leads to the last page of 500 terms."""
    cursor = None
    while True:
        params = {**RESOURCE, "limit": 500, **({"cursor": cursor} if cursor else {})}
        following = audit(http, params).get("next_cursor")
        if following is None:
            return cursor
        cursor = following


def read_everything(http: Http) -> int:
    """Read the whole history at the default limit, following next_cursor; pages read."""
    pages, cursor = 0, None
    while True:
        data = audit(http, {**RESOURCE, **({"cursor": cursor} if cursor else {})})
        pages += 1
        cursor = data.get("next_cursor")
        if cursor is None:
            return pages


@contextlib.contextmanager
def readers(url: str, key: str, count: int) -> Iterator[list[int]]:
    """`count` threads reading the whole history in a loop; the pages they read, when done."""
    stop = threading.Event()
    pages = [0]

    def loop() -> None:
        http = Http(url, key)
        while not stop.is_set():
            pages[0] += read_everything(http)

    threads = [threading.Thread(target=loop) for _ in range(count)]
    for thread in threads:
        thread.start()
    time.sleep(1)  # let them start
    try:
        yield pages
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def acquires(http: Http, tag: str) -> list[float]:
    spent = []
    for n in range(ACQUIRES):
        body = {
            "resource_type": "q",
            "resource_id": f"{tag}-{n}",
            "purpose": "p",
            "ttl_seconds": 60,
        }
        started = time.perf_counter()
        status, answer = http.request("POST", "/v1/leases", body)
        spent.append(time.perf_counter() - started)
        assert status == 201, answer
    return spent


def timed(call: Callable[[], object]) -> list[float]:
    spent = []
    for _ in range(SAMPLES):
        started = time.perf_counter()
        call()
        spent.append(time.perf_counter() - started)
    return spent


if __name__ == "__main__":
    sys.exit(main())
