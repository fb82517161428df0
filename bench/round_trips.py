"""An in-process acquire's statements and round trips to PostgreSQL, read from libpq's own trace.

    .venv/bin/python bench/round_trips.py [--acquires 200] [--before CHECKOUT]

A child process opens a fresh schema, makes 100 acquires to warm up, then traces every
connection of its pool (libpq's `PQtrace`, which logs each protocol message) for N acquires of
new resources through the Falcon app, as bench/instructions.py calls it, with principals
cached as a server caches them once its revocation listener is connected. A statement is a
`Query` or `Bind` message the client sends; a round trip is the client sending and then
reading: each turn from sending to reading in one connection's trace. Neither count moves with
the machine's load. `--before` counts another checkout's code first (as bench/instructions.py
does).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
WARM_UP = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--acquires", type=int, default=200)
    parser.add_argument("--before", help="another checkout, counted the same way first")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    builds = [("before", args.before)] if args.before else []
    builds.append(("this checkout", str(ROOT)))
    for name, checkout in builds:
        counts = count(Path(checkout).resolve(), args.acquires)
        print(
            f"{name}: {counts['statements'] / args.acquires:.2f} statements and "
            f"{counts['round trips'] / args.acquires:.2f} round trips per acquire",
            flush=True,
        )


def count(checkout: Path, acquires: int) -> Counter[str]:
    """Run the child on `checkout`'s code; its counts over `acquires` acquires."""
    from instructions import source_of  # beside this script

    environment = {**os.environ, "PYTHONPATH": str(source_of(checkout))}
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(acquires)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    fields = dict(line.split("=") for line in done.stdout.split())
    return Counter({name.replace("_", " "): int(value) for name, value in fields.items()})


def child(acquires: int) -> None:
    """Acquire after a warm-up, tracing each pooled connection; print the counts."""
    sys.path.insert(0, str(ROOT))
    from instructions import served  # beside this script, as is profile_acquire
    from profile_acquire import acquire

    from tests.support import postgres_schema
    from titen.api.rest.app import create_app
    from titen.service.bootstrap import bootstrap

    with tempfile.TemporaryDirectory() as folder, postgres_schema() as url:
        services = bootstrap(url, pool_size=4)
        try:
            key = services.keys.create("bench", "agent_bench", "agent")
            services.keys.set_listening(True)  # as a server's revocation listener tells it
            app = create_app(services, **served(create_app))
            acquire(app, key, WARM_UP, "warm")
            traced = trace_new_connections(services.app.recorder.datastore.pool, folder)
            acquire(app, key, acquires, "counted")
            for connection, file in traced:
                connection.pgconn.untrace()  # libpq's buffer written out
                file.close()
        finally:
            services.close()
        counts: Counter[str] = Counter()
        for trace in Path(folder).glob("trace.*"):
            counts.update(read_trace(trace.read_text()))
    print(f"statements={counts['statements']} round_trips={counts['round trips']}")


def trace_new_connections(pool: Any, folder: str) -> list[tuple[Any, IO[str]]]:
    """From now on, each connection the pool hands out is traced to a file in `folder`; the
    list of (connection, file) grows as they are handed out."""
    traced: list[tuple[Any, IO[str]]] = []
    getconn = pool.getconn

    def tracing(*args: Any, **kwargs: Any) -> Any:
        connection = getconn(*args, **kwargs)
        if all(connection is not seen for seen, _ in traced):
            file = open(os.path.join(folder, f"trace.{len(traced)}"), "w")  # noqa: SIM115
            connection.pgconn.trace(file.fileno())
            traced.append((connection, file))
        return connection

    pool.getconn = tracing
    return traced


def read_trace(text: str) -> Counter[str]:
    """Statements sent (Query, Bind) and turns from sending to reading, in one libpq trace."""
    counts: Counter[str] = Counter()
    last = "B"
    for line in text.splitlines():
        fields = line.split("\t")
        direction = next((f for f in fields if f in ("F", "B")), None)
        if direction is None:
            continue
        message = fields[fields.index(direction) + 2] if len(fields) > 3 else ""
        if direction == "F" and message in ("Query", "Bind"):
            counts["statements"] += 1
        if direction == "B" and last == "F":
            counts["round trips"] += 1
        last = direction
    return counts


if __name__ == "__main__":
    main()
