"""The connection budget on a real PostgreSQL: what a node holds idle and busy, six default
nodes and the command line within a stock `max_connections = 100`, and a full server.

Connections are counted in pg_stat_activity by their application name, `titen PID`
(storage/deadlines.py), for the processes of the node under test.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import psycopg
import pytest

from tests.support import POSTGRES_URL, TITEN, Http, Server, child_pids, create_key, titen

LEASE = {"purpose": "p", "ttl_seconds": 60, "resource_type": "deploy"}
DEFAULT_NODE_MOST = 11
"""The issue's bound for a default node (2 workers x 5, and its parent)."""


def held_by(pids: set[int]) -> int:
    """Connections to the PostgreSQL server that these processes hold now."""
    names = [f"titen {pid}" for pid in pids]
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY(%s)", [names]
        ).fetchone()
    return int(row[0])


def node_pids(server: Server) -> set[int]:
    return {server.process.pid, *child_pids(server.process.pid)}


def default_node(database: str) -> Server:
    """`titen serve` as an operator starts it: 2 workers, 16 threads, --pool-size 5."""
    return Server(database, 16, "--workers", "2")


def hammer(http: Http, clients: int, rounds: int, prefix: str) -> list[int]:
    """`clients` threads each acquiring and releasing `rounds` times; every status answered."""
    statuses: list[int] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        for i in range(rounds):
            status, body = http.request(
                "POST", "/v1/leases", {**LEASE, "resource_id": f"{prefix}-{n}-{i % 3}"}
            )
            answered = [status]
            if status == 201:
                lease = body["data"]["lease_id"]
                answered.append(http.request("DELETE", f"/v1/leases/{lease}")[0])
            with lock:
                statuses.extend(answered)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def test_a_default_node_holds_at_most_eleven_connections_idle_and_under_32_clients(
    postgres_database,
):
    key = create_key(postgres_database, "acme", "agent_alice")
    server = default_node(postgres_database)
    try:
        pids = node_pids(server)
        assert len(pids) == 3  # the parent and its two workers
        idle = held_by(pids)
        assert idle <= DEFAULT_NODE_MOST

        most = [idle]
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                most.append(held_by(pids))

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            statuses = hammer(Http(server.url, key), clients=32, rounds=6, prefix="busy")
        finally:
            done.set()
            watcher.join()
        assert set(statuses) <= {200, 201}, statuses
        assert len(most) > 1 and max(most) <= DEFAULT_NODE_MOST, most
    finally:
        server.stop()


@contextmanager
def nodes(database: str, count: int) -> Iterator[list[Server]]:
    with ExitStack() as stack:
        started = []
        for _ in range(count):
            server = default_node(database)
            stack.callback(server.stop)
            started.append(server)
        yield started


@pytest.mark.exclusive  # it counts, then fills, the server's connections
def test_six_default_nodes_and_the_command_line_fit_in_a_stock_postgresql(postgres_database):
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        limit = int(conn.execute("SHOW max_connections").fetchone()[0])
    if limit > 100:
        pytest.skip(f"max_connections is {limit}: the point is a stock 100")
    key = create_key(postgres_database, "acme", "agent_alice")
    with nodes(postgres_database, 6) as six:
        for n, server in enumerate(six):
            statuses = hammer(Http(server.url, key), clients=8, rounds=2, prefix=f"node{n}")
            assert set(statuses) <= {200, 201}, (n, statuses)
        held = held_by({pid for server in six for pid in node_pids(server)})
        assert held <= 6 * DEFAULT_NODE_MOST
        # With every node's pool in use, the command line still gets its connections.
        bob = ["keys", "create", "--org", "acme", "--principal", "agent_bob"]
        titen(*bob, database=postgres_database)


@contextmanager
def server_full() -> Iterator[None]:
    """Every connection slot of the PostgreSQL server taken, until the block ends."""
    taken = []
    try:
        while True:
            try:
                taken.append(psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3))
            except psycopg.OperationalError as refused:
                assert "too many clients" in str(refused)
                break
        yield
    finally:
        for conn in taken:
            conn.close()


@pytest.mark.exclusive  # it counts, then fills, the server's connections
def test_a_full_postgresql_keeps_a_running_node_serving_and_the_command_line_says_why(
    postgres_database,
):
    key = create_key(postgres_database, "acme", "agent_alice")
    server = Server(postgres_database, 4)
    try:
        http = Http(server.url, key)
        assert set(hammer(http, clients=4, rounds=2, prefix="warm")) <= {200, 201}
        assert held_by(node_pids(server)) >= 3  # LISTENs and at least one for requests
        with server_full():
            statuses = hammer(http, clients=2, rounds=3, prefix="full")
            assert set(statuses) <= {200, 201}, statuses
            run = subprocess.run(
                [TITEN, "keys", "create", "--org", "acme", "--principal", "agent_bob"],
                capture_output=True,
                text=True,
                env={**os.environ, "TITEN_DATABASE_URL": postgres_database},
                timeout=60,
            )
        assert run.returncode != 0
        said = [line for line in run.stderr.splitlines() if line.strip()]
        assert len(said) == 1, run.stderr
        assert said[0].startswith("titen: ") and "too many clients" in said[0], said
        assert "Traceback" not in run.stderr
    finally:
        server.stop()
