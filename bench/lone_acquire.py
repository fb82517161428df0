"""A lone acquire's latency, one build against another, on the same machine minutes apart.

    .venv/bin/python bench/lone_acquire.py --backend postgres --before BEFORE/titen [--rounds 3]

Each round starts `titen serve --workers 1` of each build in turn (the `--before` command, then
this checkout's), each on a fresh store of its own, and times `--acquires` acquires of distinct
resources one after another on one kept-alive connection (bench/acquire_timing.py), after 50 to
warm up. Rounds alternate the builds so that a change in the machine's load shows as a spread
between rounds rather than as a difference between builds. Bounded: every server is stopped and
every store dropped, whatever happens.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from acquire_timing import acquire_seconds, load, make_keys, p50_ms, p99_ms, store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import STARTUP_BOUND, TITEN, Http, free_port


def serve(titen: str, database: str) -> tuple[subprocess.Popen[bytes], int]:
    """`titen serve` of the given build, healthy, and its port."""
    port = free_port()
    process = subprocess.Popen(
        [titen, "serve", "--port", str(port), "--workers", "1", "--database", database],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + STARTUP_BOUND
    while time.monotonic() < deadline:
        try:
            if Http(f"http://127.0.0.1:{port}").request("GET", "/healthz")[0] == 200:
                return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{titen} serve did not become healthy")


def measure(titen: str, backend: str, acquires: int) -> list[float]:
    with store(backend) as database:
        (key,) = make_keys(database, [("bench", "agent_bench", "agent")])
        process, port = serve(titen, database)
        try:
            acquire_seconds(port, key, 50, "warm")
            return acquire_seconds(port, key, acquires, "lone")
        finally:
            process.terminate()
            process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--before", required=True, help="the titen command of the other build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--acquires", type=int, default=1000)
    args = parser.parse_args()
    builds = {"before": args.before, "after": TITEN}
    p50s: dict[str, list[float]] = {name: [] for name in builds}
    for round_ in range(1, args.rounds + 1):
        for name, titen in builds.items():
            print(f"round {round_}, {name}: {load()}")
            took = measure(titen, args.backend, args.acquires)
            p50s[name].append(p50_ms(took))
            print(f"  acquire p50 {p50_ms(took)} ms, p99 {p99_ms(took)} ms ({len(took)})")
    for name, values in p50s.items():
        print(f"{name}: p50 per round {values} ms; median {statistics.median(values)} ms")


if __name__ == "__main__":
    main()
