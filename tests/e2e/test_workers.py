"""`titen serve --workers N`: worker processes on one port sharing one database, on both
backends. Which worker served a request is read from its JSON log line (`pid`, correlated by
the X-Request-Id the test sends); the workers are the server process's children."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support import (
    TITEN,
    Http,
    Server,
    alive,
    child_pids,
    create_key,
    eventually,
    free_port,
    sample,
    scrape,
    titen,
)
from titen.api.rest.settings import DEFAULT_WORKERS

WORKERS = 2
REVOCATION_BOUND_SECONDS = 10
"""A bound for a revocation that never arrives, not a pace: it takes milliseconds when idle."""
LEASE = {"resource_type": "deploy", "purpose": "p", "ttl_seconds": 60}


def start(database: str, *options: str, own_group: bool = False, workers: int = WORKERS) -> Server:
    server = Server(
        database,
        4,
        "--workers",
        str(workers),
        "--log-format",
        "json",
        *options,
        own_group=own_group,
    )
    eventually(lambda: len(child_pids(server.process.pid)) == workers, "every worker running")
    return server


pytestmark = pytest.mark.server("--workers", str(WORKERS), "--log-format", "json", threads=4)


class Traced:
    """Requests that each carry an X-Request-Id, on a new connection each, and which worker
    (process id) served each, from the server's request log."""

    def __init__(self, server: Server, key: str):
        self.server = server
        self.http = Http(server.url, key)

    def request(self, method: str, path: str, json: object = None) -> tuple[str, int, dict]:
        request_id = uuid.uuid4().hex
        status, body = self.http.request(method, path, json, headers={"x-request-id": request_id})
        return request_id, status, body or {}

    def served_by(self, *request_ids: str) -> list[int]:
        """The pid of the worker that logged each request (waiting for its line if need be)."""
        found: dict[str, int] = {}

        def logged() -> bool:
            for line in self.server.log_lines():
                if line.get("logger") == "titen.requests":
                    found[line["request_id"]] = line["pid"]
            return all(r in found for r in request_ids)

        eventually(logged, "every request's log line")
        return [found[r] for r in request_ids]


def spread(traced: Traced, workers: set[int], make: int = 16) -> dict[int, int]:
    """Make requests in parallel batches until every worker has served some; how many each."""
    counts: dict[int, int] = {}
    deadline = time.monotonic() + 20
    while set(counts) != workers:
        assert time.monotonic() < deadline, f"served by {counts}, workers {workers}"
        with ThreadPoolExecutor(8) as pool:
            made = list(pool.map(lambda _: traced.request("GET", "/v1/handoffs"), range(make)))
        assert all(status == 200 for _, status, _ in made)
        for pid in traced.served_by(*(request_id for request_id, _, _ in made)):
            counts[pid] = counts.get(pid, 0) + 1
    return counts


def test_every_worker_serves_requests_on_the_one_port(server):
    workers = child_pids(server.process.pid)
    traced = Traced(server, create_key(server.database, "acme", "agent_a"))
    counts = spread(traced, workers)
    assert set(counts) == workers


def test_a_write_is_read_back_through_any_worker(server):
    workers = child_pids(server.process.pid)
    alice = Traced(server, create_key(server.database, "acme", "agent_alice"))
    bob = Traced(server, create_key(server.database, "acme", "agent_bob"))
    crossed = 0
    for n in range(40):
        resource = {**LEASE, "resource_id": f"r{n}"}
        wrote, status, body = alice.request("POST", "/v1/leases", resource)
        assert status == 201, body
        lease_id = body["data"]["lease_id"]
        read, status, body = alice.request("GET", f"/v1/leases/{lease_id}")
        assert status == 200 and body["data"]["lease_id"] == lease_id
        raced, status, body = bob.request("POST", "/v1/leases", resource)
        assert status == 409, body  # the other worker's commit is seen at once
        first, *others = alice.served_by(wrote, read, raced)
        crossed += any(pid != first for pid in others)
        assert {first, *others} <= workers
        if crossed >= 3:
            break
    assert crossed >= 3, "requests never crossed workers"


def test_a_revoked_key_is_refused_by_every_worker_and_stays_refused(server):
    """Each worker learns of the revocation from its own listener (a NOTIFY on PostgreSQL, a
    poll on SQLite), a moment after the CLI's commit: each must refuse the key within the
    moment docs/operations.md gives, and no worker may accept it again once it has refused it.
    (Asserting the first request after the commit was refused failed now and then under load.)"""
    workers = child_pids(server.process.pid)
    key = create_key(server.database, "acme", "agent_a")
    traced = Traced(server, key)
    spread(traced, workers)  # the key is in each worker's cache now

    titen("keys", "revoke", "--org", "acme", "--principal", "agent_a", database=server.database)

    refused_by: set[int] = set()
    deadline = time.monotonic() + REVOCATION_BOUND_SECONDS
    while refused_by != workers:
        assert time.monotonic() < deadline, f"refused only by {refused_by} of {workers}"
        request_id, status, body = traced.request("GET", "/v1/handoffs")
        (worker,) = traced.served_by(request_id)
        if status == 200:
            assert worker not in refused_by, f"worker {worker} accepted the key again"
        else:
            assert status == 401, body
            refused_by.add(worker)


def test_a_worker_that_dies_is_replaced_and_reported(server):
    workers = child_pids(server.process.pid)
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)
    eventually(
        lambda: len(child_pids(server.process.pid) - {victim}) == WORKERS, "a new worker", 30
    )
    assert victim not in child_pids(server.process.pid)
    traced = Traced(server, create_key(server.database, "acme", "agent_a"))
    spread(traced, child_pids(server.process.pid))
    assert f"worker {victim} was killed by SIGKILL" in server.log_so_far()


@pytest.mark.parametrize(
    "stop",
    [
        pytest.param(lambda process: process.send_signal(signal.SIGTERM), id="sigterm"),
        # A terminal's Ctrl-C signals the whole foreground process group.
        pytest.param(lambda process: os.killpg(process.pid, signal.SIGINT), id="ctrl-c"),
    ],
)
def test_a_stop_signal_stops_every_worker_and_exits_0(database, stop):
    server = start(database, own_group=True)
    try:
        workers = child_pids(server.process.pid)
        stop(server.process)
        assert server.process.wait(timeout=30) == 0
        assert not any(alive(pid) for pid in workers)
    finally:
        server.stop()
    assert "stopping 2 workers" in server.log


def test_workers_stop_when_their_parent_is_killed(database):
    server = start(database)
    workers = child_pids(server.process.pid)
    server.kill()
    eventually(lambda: not any(alive(pid) for pid in workers), "orphaned workers gone", 30)


def test_two_servers_started_at_once_on_a_new_database_both_serve(database):
    with ThreadPoolExecutor(2) as pool:  # the fixture's database is new: nothing opened it
        started = list(pool.map(lambda _: _try_start(database), range(2)))
    try:
        assert [str(s) for s in started if isinstance(s, Exception)] == []
        key = create_key(database, "acme", "agent_a")
        for server in started:
            assert isinstance(server, Server)
            spread(Traced(server, key), child_pids(server.process.pid))
    finally:
        for server in started:
            if isinstance(server, Server):
                server.stop()


def _try_start(database: str) -> Server | Exception:
    try:
        return start(database)
    except (RuntimeError, AssertionError) as exc:
        return exc


def test_metrics_sum_every_worker(database):
    port = free_port()
    server = start(database, "--metrics-port", str(port))
    try:
        workers = child_pids(server.process.pid)
        traced = Traced(server, create_key(database, "acme", "agent_a"))
        before = scrape(port)
        acquired_by: dict[int, int] = {}
        n = 0
        while set(acquired_by) != workers or n < 10:
            assert n < 200, f"acquires served by {acquired_by}"
            lease = {**LEASE, "resource_id": f"m{n}"}
            request_id, status, _ = traced.request("POST", "/v1/leases", lease)
            assert status == 201
            [pid] = traced.served_by(request_id)
            acquired_by[pid] = acquired_by.get(pid, 0) + 1
            n += 1
        listed = spread(traced, workers)
        after = scrape(port)

        def moved(name: str, **labels: str) -> float:
            return sample(after, name, **labels) - sample(before, name, **labels)

        requests = "titen_http_requests_total"
        assert moved("titen_leases_acquired_total") == n
        assert moved(requests, method="POST", route="/v1/leases", status="201") == n
        assert moved(requests, method="GET", route="/v1/handoffs", status="200") == sum(
            listed.values()
        )
        durations = "titen_http_request_duration_seconds_count"
        assert moved(durations, method="POST", route="/v1/leases") == n

        # A worker's counts stay in the sums after it dies and another takes its place.
        os.kill(min(workers), signal.SIGKILL)
        eventually(lambda: len(child_pids(server.process.pid) - workers) == 1, "a new worker")
        assert sample(scrape(port), "titen_leases_acquired_total") == sample(
            after, "titen_leases_acquired_total"
        )
    finally:
        server.stop()


def test_a_number_of_workers_that_is_no_number_is_refused(database):
    done = subprocess.run(
        [TITEN, "serve", "--workers", "0", "--database", database],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "not a number of workers" in done.stderr


def test_one_worker_stops_on_sigterm_and_exits_0(database):
    server = Server(database, 4, "--workers", "1")
    try:
        assert child_pids(server.process.pid) == set()  # it serves itself
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
    finally:
        server.stop()


def test_the_default_number_of_workers_is_the_backends(database):
    kind = "sqlite" if database.startswith("sqlite") else "postgres"
    port = free_port()
    default = subprocess.Popen(
        [TITEN, "serve", "--port", str(port), "--database", database], stderr=subprocess.DEVNULL
    )
    try:
        eventually(lambda: _healthy(port), "the server up", 30)
        processes = 1 + len(child_pids(default.pid))
        assert processes == DEFAULT_WORKERS[kind] + (DEFAULT_WORKERS[kind] > 1)  # + the parent
    finally:
        default.terminate()
        assert default.wait(timeout=30) == 0


def answer(connection: http.client.HTTPConnection) -> int:
    response = connection.getresponse()
    response.read()
    return response.status


def _healthy(port: int) -> bool:
    try:
        return Http(f"http://127.0.0.1:{port}").request("GET", "/healthz")[0] == 200
    except OSError:
        return False


def listening_sockets(port: int) -> int:
    """The sockets listening on `port`, from the kernel's table."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(
        int(line.split()[1].split(":")[1], 16) == port and line.split()[3] == "0A" for line in lines
    )


def test_each_worker_listens_on_a_socket_of_its_own_and_a_new_worker_too(server):
    """The kernel shares connections out between the workers' own SO_REUSEPORT sockets; the
    parent holds the port without listening, so it is never handed one."""
    assert listening_sockets(server.port) == WORKERS
    workers = child_pids(server.process.pid)
    os.kill(min(workers), signal.SIGKILL)
    eventually(lambda: len(child_pids(server.process.pid) - workers) == 1, "a new worker")
    eventually(lambda: listening_sockets(server.port) == WORKERS, "the new worker listening")
    assert Http(server.url).request("GET", "/healthz")[0] == 200


def test_a_burst_of_connections_reaches_every_worker(server):
    """Sixteen connections opened at once (wrk's, a client pool's warming up) and kept open:
    the kernel's hash gives each of two workers some (all 16 on one: 1 in 32,768). From one
    shared socket, one worker took 13 to 16 of 16."""
    traced = Traced(server, create_key(server.database, "acme", "agent_a"))
    request_ids = [uuid.uuid4().hex for _ in range(16)]
    connections = [
        http.client.HTTPConnection("127.0.0.1", server.port, timeout=30) for _ in request_ids
    ]
    try:
        for connection in connections:
            connection.connect()
        for connection, request_id in zip(connections, request_ids, strict=True):
            connection.request("GET", "/healthz", headers={"x-request-id": request_id})
        assert {answer(connection) for connection in connections} == {200}
        held = Counter(traced.served_by(*request_ids))
    finally:
        for connection in connections:
            connection.close()
    assert set(held) == child_pids(server.process.pid), held


def test_a_second_server_of_workers_on_the_same_port_is_refused(server):
    """SO_REUSEPORT alone would let a second server's workers join the first's port and take
    half its connections: the port is first taken with a plain bind, which is refused."""
    done = subprocess.run(
        [
            TITEN,
            "serve",
            "--workers",
            "2",
            "--port",
            str(server.port),
            "--database",
            server.database,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{server.port}: the port is already in use" in done.stderr
    assert listening_sockets(server.port) == WORKERS
