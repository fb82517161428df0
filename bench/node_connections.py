"""Issue 22: how many PostgreSQL connections one default node holds, idle and under load.

Starts one `titen serve` as deployed by default (2 workers, 16 threads, --pool-size 5) on a
fresh schema of $TITEN_TEST_POSTGRES_URL, and counts the rows of pg_stat_activity whose
application_name names one of its processes (`titen PID`: storage/deadlines.py): right after
start (idle), the most seen while `--clients` (32) threads acquire and release for `--seconds`
(15), and idle again 35 and 95 s after the load (the pool closes what stays unused, one
connection per worker and 30 s period, so the count falls in steps). The bound is 2 x 5 = 10
(docs/deployment.md#connections).

    TITEN_TEST_POSTGRES_URL=... .venv/bin/python bench/node_connections.py [--clients 32]
        [--seconds 15]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import POSTGRES_URL, Http, Server, child_pids, create_key, postgres_schema

IDLE_AFTER = (35.0, 95.0)
"""When to count again after the load: psycopg_pool closes at most one connection that stayed
unused through a whole 30 s period, per worker and period, so an idle node sheds them slowly."""


def held(conn: psycopg.Connection, server: Server) -> int:
    names = [f"titen {pid}" for pid in {server.process.pid, *child_pids(server.process.pid)}]
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY(%s)", [names]
    ).fetchone()
    return row[0] if row else 0


def load(url: str, key: str, index: int, stop: threading.Event) -> None:
    http = Http(url, key)
    body = {"resource_type": "deploy", "purpose": "p", "ttl_seconds": 60}
    for step in itertools.count():
        if stop.is_set():
            return
        status, answer = http.request(
            "POST", "/v1/leases", {**body, "resource_id": f"c{index}-{step % 4}"}
        )
        if status == 201:
            http.request("DELETE", f"/v1/leases/{answer['data']['lease_id']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=15)
    args = parser.parse_args()
    with postgres_schema() as database, psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        key = create_key(database, "acme", "agent_a")
        server = Server(database, 16, "--workers", "2", "--pool-size", "5")
        try:
            time.sleep(1)
            print(f"idle after start: {held(conn, server)} connections")
            stop = threading.Event()
            clients = [
                threading.Thread(target=load, args=(server.url, key, i, stop))
                for i in range(args.clients)
            ]
            for client in clients:
                client.start()
            most, deadline = 0, time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                most = max(most, held(conn, server))
                time.sleep(0.05)
            stop.set()
            for client in clients:
                client.join()
            print(f"under {args.clients} clients: at most {most} connections")
            ended = time.monotonic()
            for after in IDLE_AFTER:
                time.sleep(max(0.0, ended + after - time.monotonic()))
                print(f"idle {after:g} s after the load: {held(conn, server)} connections")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
