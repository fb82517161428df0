"""Two builds of titen measured in alternating pairs, for a before/after on a shared machine.

Each git revision is exported (`git archive`) to a temporary folder and served from there
(PYTHONPATH, with this venv's libraries) by a `titen serve` of its own on a store of its own;
then, round after round, wrk loads each in turn (the order reversed every other round) with
`GET /healthz` or with acquires of new resources (bench/acquire.lua), at each connection count.
A change in the machine's load then moves both builds' figures of a round alike. Prints every
run and the medians.

    .venv/bin/python bench/paired.py BEFORE AFTER [--what healthz|acquire]
        [--backend sqlite|postgres] [--workers N] [--connections 16,1] [--rounds 4] [--seconds 3]
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from acquire_timing import load, store

ROOT = Path(__file__).resolve().parents[1]
LUA = ROOT / "bench" / "acquire.lua"


@contextmanager
def build(revision: str) -> Iterator[str]:
    """The `src` folder of `revision`, exported from this repository."""
    with tempfile.TemporaryDirectory(prefix="titen-build-") as folder:
        archive = subprocess.run(
            ["git", "archive", revision], cwd=ROOT, capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        yield f"{folder}/src"


def make_key(src: str, database: str) -> str:
    code = (
        "from titen.service.bootstrap import bootstrap\n"
        f"s = bootstrap({database!r}, pool_size=2)\n"
        "print(s.keys.create('acme', 'bench', 'agent'))\n"
        "s.close()\n"
    )
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.split()[-1]


@contextmanager
def serving(src: str, database: str, workers: int, port: int) -> Iterator[None]:
    titen = [sys.executable, "-c", "from titen.api.cli.main import main; main()", "serve"]
    options = ["--workers", str(workers), "--threads", "16", "--port", str(port)]
    server = subprocess.Popen(
        [*titen, *options, "--database", database, "--log-format", "json"],
        env={**os.environ, "PYTHONPATH": src},
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not healthy(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"titen serve from {src} did not start")
            time.sleep(0.1)
        yield
    finally:
        server.terminate()
        server.wait(30)


def healthy(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wrk(port: int, connections: int, seconds: int, what: str, key: str, tag: str) -> float:
    url = f"http://127.0.0.1:{port}"
    args = ["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{seconds}s"]
    if what == "healthz":
        args.append(f"{url}/healthz")
    else:
        args += ["-s", str(LUA), f"{url}/v1/leases", "--", key, tag]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if found is None:
        raise RuntimeError(f"wrk said: {out}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--what", choices=("healthz", "acquire"), default="healthz")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--connections", default="16,1")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=3)
    args = parser.parse_args()
    counts = [int(n) for n in args.connections.split(",")]
    names = (args.before, args.after)
    figures: dict[tuple[str, int], list[float]] = {(n, c): [] for n in names for c in counts}
    print(load())
    with ExitStack() as stack:
        ports, keys = {}, {}
        for name in names:
            src = stack.enter_context(build(name))
            database = stack.enter_context(store(args.backend))
            keys[name] = make_key(src, database)
            ports[name] = free_port()
            stack.enter_context(serving(src, database, args.workers, ports[name]))
        for round_ in range(args.rounds):
            order = names if round_ % 2 == 0 else names[::-1]
            for count in counts:
                for name in order:
                    tag = f"r{round_}c{count}"
                    rate = wrk(ports[name], count, args.seconds, args.what, keys[name], tag)
                    figures[name, count].append(rate)
                    print(f"round {round_}: {name} at {count} connections: {rate:,.0f}/s")
    print(load())
    for (name, count), rates in figures.items():
        runs = ", ".join(f"{rate:,.0f}" for rate in rates)
        print(f"{name} at {count}: median {statistics.median(rates):,.0f}/s ({runs})")


if __name__ == "__main__":
    main()
