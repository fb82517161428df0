"""The kill storm: how many of the 503s a storm of ended connections draws say "unknown".

`titen serve --workers 2` on a fresh PostgreSQL schema serves six clients (acquire, release,
handoff create and resolve, half with an Idempotency-Key: tests/e2e/test_fault_soak.py's
clients) while every PostgreSQL session of its workers is ended every `--interval` seconds
(0.3) for `--seconds` (20). Prints, per run, the answers by status, the 503s, those that said
the outcome is unknown (`OUTCOME_UNKNOWN`; before that code, the messages "could not tell" and
"outcome is unknown") and their share. The target: at most 1 in 10.

    .venv/bin/python bench/kill_storm.py [--seconds 20] [--interval 0.3] [--runs 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.test_fault_soak import CLIENTS, Call, Killer, client
from tests.support import Http, Server, create_key, postgres_schema

SAID_UNKNOWN = ("OUTCOME_UNKNOWN", "could not tell", "outcome is unknown")


def storm(seconds: float, interval: float) -> tuple[Counter[int], int, int]:
    """One storm on a fresh schema: the answers by status, the 503s, the unknown ones."""
    with postgres_schema() as database:
        alice = create_key(database, "acme", "agent_alice")
        bob = create_key(database, "acme", "agent_bob")
        server = Server(database, 8, "--workers", "2")
        try:
            killer = Killer(database, server, pause=(interval, interval))
            calls: list[Call] = []
            until = time.monotonic() + seconds
            http = Http(server.url, alice), Http(server.url, bob)
            threads = [
                threading.Thread(target=client, args=(n, *http, until, calls))
                for n in range(CLIENTS)
            ]
            killer.thread.start()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            killer.stop.set()
            killer.thread.join()
        finally:
            server.stop()
    refused = [call for call in calls if call.status == 503]
    unknown = [c for c in refused if any(s in json.dumps(c.answer) for s in SAID_UNKNOWN)]
    return Counter(call.status for call in calls), len(refused), len(unknown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.3)
    parser.add_argument("--runs", type=int, default=1)
    options = parser.parse_args()
    for run in range(1, options.runs + 1):
        answered, refused, unknown = storm(options.seconds, options.interval)
        share = unknown / refused if refused else 0.0
        print(
            f"run {run}: answers {dict(sorted(answered.items()))}; 503s {refused}, "
            f"unknown {unknown} ({share:.1%}; target at most 10%)",
            flush=True,
        )


if __name__ == "__main__":
    main()
