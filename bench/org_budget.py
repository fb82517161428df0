"""One organization floods, another makes lone acquires: what the second one sees, without and
with a request budget per organization (`titen serve --org-rate`).

    .venv/bin/python bench/org_budget.py --backend sqlite [--rate 200] [--acquires 300]

For each setting (`--org-rate 0`, no budget; then `--org-rate RATE`) a fresh store and a server
of the backend's default worker count: `--acquires` acquires by organization `calm`, one after
another on one kept-alive connection (bench/acquire_timing.py), alone; then again while wrk
floods with acquires as organization `flood` over 64 connections. Prints the calm acquires'
p50 and p99 in each phase, and the flood's answers (2xx and the rest: its 429s). Bounded: every
server and wrk is stopped and every store dropped, whatever happens.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from acquire_timing import acquire_seconds, load, make_keys, p50_ms, p99_ms, store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import STARTUP_BOUND, TITEN, Http, free_port

HERE = Path(__file__).resolve().parent
FLOOD_CONNECTIONS = 64


def serve(database: str, rate: float) -> tuple[subprocess.Popen[bytes], int]:
    """`titen serve --org-rate RATE` on the store, healthy, and its port."""
    port = free_port()
    command = [TITEN, "serve", "--port", str(port), "--database", database]
    process = subprocess.Popen(
        [*command, "--org-rate", f"{rate:g}"],
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
    raise RuntimeError("titen serve did not become healthy")


def flood(port: int, key: str, seconds: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            "wrk",
            "-t2",
            f"-c{FLOOD_CONNECTIONS}",
            f"-d{seconds}s",
            "-s",
            str(HERE / "acquire.lua"),
            f"http://127.0.0.1:{port}",
            "--",
            key,
            "flood",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def measure(backend: str, rate: float, acquires: int, seconds: int) -> None:
    with store(backend) as database:
        calm, flooding = make_keys(
            database, [("calm", "agent_calm", "agent"), ("flood", "agent_flood", "agent")]
        )
        process, port = serve(database, rate)
        wrk = None
        try:
            acquire_seconds(port, calm, 50, "warm")
            alone = acquire_seconds(port, calm, acquires, "alone")
            wrk = flood(port, flooding, seconds)
            time.sleep(1)  # the flood at full strength before the calm acquires start
            during = acquire_seconds(port, calm, acquires, "during")
            output, _ = wrk.communicate(timeout=seconds + 60)
            label = "no budget" if rate == 0 else f"--org-rate {rate:g}"
            print(f"{label}: {load()}")
            print(f"  calm alone:  p50 {p50_ms(alone)} ms, p99 {p99_ms(alone)} ms")
            print(f"  calm during: p50 {p50_ms(during)} ms, p99 {p99_ms(during)} ms")
            print(f"  flood: {_flood_summary(output)}")
        finally:
            if wrk is not None and wrk.poll() is None:
                wrk.kill()
                wrk.wait()
            process.terminate()
            process.wait(timeout=30)


def _flood_summary(output: str) -> str:
    """wrk's requests per second and the answers that were not 201 (bench/acquire.lua's)."""
    found = re.search(r"RESULT requests=(\d+) duration_us=(\d+) .*wrong_status=(\d+)", output)
    if found is None:
        return output.strip()
    requests, duration, refused = (int(group) for group in found.groups())
    return f"{requests / (duration / 1e6):.0f} req/s, {refused} of {requests} not 201"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--rate", type=float, default=200, help="the budget measured")
    parser.add_argument("--acquires", type=int, default=300)
    parser.add_argument("--flood-seconds", type=int, default=20)
    args = parser.parse_args()
    for rate in (0, args.rate):
        measure(args.backend, rate, args.acquires, args.flood_seconds)


if __name__ == "__main__":
    main()
