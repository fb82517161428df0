"""A lock on the events table held for 15 s by another session: bounded waits, on a real server.

Before, every request waited the whole 15 s (the configured lock timeout never fired) and
`/readyz` did not answer within 10 s. Now a command gives up within about 10 s with 503
UNAVAILABLE and Retry-After, `/readyz` answers within 2 s whatever the lock (503 when it cannot
read), `/healthz` never touches the database, and once the lock is gone writes go through.
EXCLUSIVE blocks writers only; ACCESS EXCLUSIVE blocks every reader of the table too.
"""

from __future__ import annotations

import http.client
import json
import threading
import time

import psycopg
import pytest

from tests.support import Server, create_key, eventually

LEASE = {"purpose": "p", "ttl_seconds": 60, "resource_type": "deploy"}
HELD_SECONDS = 15.0
COMMAND_BOUND = 12.0
"""The most a command may wait (about 10 s promised; the slack is for a loaded machine)."""
PROBE_BOUND = 2.0
"""The most `/readyz` and `/healthz` may take (docs/operations.md)."""


def timed(server: Server, key: str, method: str, path: str, body: object = None):
    """Status, headers, JSON body of one request, and how long its answer took."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    started = time.monotonic()
    try:
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        conn.request(method, path, None if body is None else json.dumps(body), headers)
        response = conn.getresponse()
        answer = json.loads(response.read())
        return response.status, dict(response.getheaders()), answer, time.monotonic() - started
    finally:
        conn.close()


class Locker:
    """Another session that holds a lock on the events table for HELD_SECONDS."""

    def __init__(self, database: str, mode: str):
        self.conninfo = database.split("?", 1)[0]
        self.schema = database.rsplit("schema=", 1)[1]
        self.mode = mode
        self.held = threading.Event()
        self.released = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)
        self.thread.start()
        assert self.held.wait(30), "the lock was not taken"

    def _hold(self) -> None:
        with psycopg.connect(self.conninfo) as conn:
            conn.execute(f'LOCK TABLE "{self.schema}".titen_events IN {self.mode} MODE')
            self.held.set()
            time.sleep(HELD_SECONDS)  # the fault's length, not a wait for something
            conn.rollback()
        self.released.set()


@pytest.mark.parametrize("mode", ["EXCLUSIVE", "ACCESS EXCLUSIVE"])
def test_a_15_s_lock_on_the_events_table_answers_within_bounds(postgres_database, mode):
    key = create_key(postgres_database, "acme", "agent_alice")
    server = Server(postgres_database, 8)
    try:
        lease = {**LEASE, "resource_id": "warm"}
        assert timed(server, key, "POST", "/v1/leases", lease)[0] == 201
        locker = Locker(postgres_database, mode)
        lease = {**LEASE, "resource_id": "locked"}
        status, headers, body, took = timed(server, key, "POST", "/v1/leases", lease)
        assert status == 503 and body["error"]["code"] == "UNAVAILABLE", body
        assert int(headers["Retry-After"]) > 0
        assert took < COMMAND_BOUND, took
        assert not locker.released.is_set()  # it answered while the lock was held
        readable = mode == "EXCLUSIVE"  # else reading the log waits for the lock too
        for probe, expected in (("/readyz", 200 if readable else 503), ("/healthz", 200)):
            status, _, body, took = timed(server, key, "GET", probe)
            assert status == expected and took < PROBE_BOUND, (probe, status, took, body)
        assert not locker.released.is_set()
        locker.thread.join()
        eventually(
            lambda: timed(server, key, "GET", "/readyz")[0] == 200, "ready once the lock is gone"
        )
        eventually(
            lambda: timed(server, key, "POST", "/v1/leases", lease)[0] == 201,
            "a write goes through once the lock is gone",
        )
        events = timed(server, key, "GET", "/v1/events?types=lease.acquired")[2]["data"]["events"]
        assert [e["data"]["resource_id"] for e in events] == ["warm", "locked"]
        assert "Traceback" not in server.log_so_far()
    finally:
        server.stop()
