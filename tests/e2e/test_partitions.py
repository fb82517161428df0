"""A database that stops answering, as a real server sees it: bounded waits, then 503.

Nothing here measures time: each wait must end while its cause is still there (the proxy still
black-holed, the table still locked), so a server that waited for the cause to end would never
answer in time and the client's own timeout would fail the test.
"""

from __future__ import annotations

import time

import psycopg

from tests.support import Http, Server, create_key, eventually

LEASE = {"purpose": "p", "ttl_seconds": 60, "resource_type": "deploy"}


def acquired(http: Http, resource: str) -> list[dict]:
    status, page = http.request("GET", "/v1/events?limit=500&types=lease.acquired")
    assert status == 200
    return [e for e in page["data"]["events"] if e["data"]["resource_id"] == resource]


def test_a_black_holed_database_answers_503_and_the_node_recovers_by_itself(
    postgres_database,
    proxied,
):
    proxy, through_proxy = proxied
    key = create_key(postgres_database, "acme", "agent_alice")
    server = Server(through_proxy, 8)
    try:
        http = Http(server.url, key)
        assert http.request("POST", "/v1/leases", {**LEASE, "resource_id": "before"})[0] == 201

        proxy.black_hole()
        once = {"Idempotency-Key": "across-the-cut"}
        status, body = http.request(
            "POST", "/v1/leases", {**LEASE, "resource_id": "cut"}, headers=once
        )
        assert status == 503 and body["error"]["code"] == "UNAVAILABLE", body
        ready, report = http.request("GET", "/readyz")
        assert ready == 503 and report["data"]["status"] == "unavailable", report
        assert http.request("GET", "/healthz")[0] == 200

        proxy.restore()
        answers: list[int] = []

        def retried() -> bool:
            status, _ = http.request(
                "POST", "/v1/leases", {**LEASE, "resource_id": "cut"}, headers=once
            )
            answers.append(status)
            return status == 201

        eventually(retried, "the retried acquire succeeds after the heal", timeout=20)
        assert set(answers) <= {201, 503}, answers
        assert http.request("GET", "/readyz")[0] == 200
        assert len(acquired(http, "cut")) == 1
        print(server.log_so_far())
        assert "Traceback" not in server.log_so_far()
    finally:
        proxy.restore()
        server.stop()


def test_a_locked_event_table_answers_503_while_the_lock_is_still_held(postgres_database):
    key = create_key(postgres_database, "acme", "agent_alice")
    server = Server(postgres_database, 4)
    schema = postgres_database.rsplit("schema=", 1)[1]
    try:
        http = Http(server.url, key)
        assert http.request("POST", "/v1/leases", {**LEASE, "resource_id": "warm"})[0] == 201
        with psycopg.connect(postgres_database.split("?", 1)[0]) as locker:
            locker.execute(f'LOCK TABLE "{schema}".titen_events IN EXCLUSIVE MODE')
            status, body = http.request("POST", "/v1/leases", {**LEASE, "resource_id": "locked"})
            assert status == 503 and body["error"]["code"] == "UNAVAILABLE", body
            ready = http.request("GET", "/readyz")[0]
            assert ready in (200, 503)  # it answers; reading does not need the lock
            locker.rollback()
        assert acquired(http, "locked") == []
        assert http.request("POST", "/v1/leases", {**LEASE, "resource_id": "locked"})[0] == 201
    finally:
        server.stop()


READY_SECONDS = 2.0
"""docs/operations.md: /readyz answers within this always, with a key or without."""


def test_readiness_with_an_operator_key_answers_within_its_bound_while_the_database_is_gone(
    postgres_database,
    proxied,
):
    """The key's lookup (a key this node has not seen, so it asks the database) waits on the
    same black hole as the readiness read: both together stay within the bound."""
    proxy, through_proxy = proxied
    agent = create_key(postgres_database, "acme", "agent_alice")
    operator = create_key(postgres_database, "acme", "ops", "operator")
    server = Server(through_proxy, 8)
    try:
        assert Http(server.url, agent).request("GET", "/readyz")[0] == 200
        proxy.black_hole()
        for key in (operator, None):
            began = time.monotonic()
            status, report = Http(server.url, key).request("GET", "/readyz")
            took = time.monotonic() - began
            assert status == 503 and report["data"]["status"] == "unavailable", report
            assert took < READY_SECONDS, (key is not None, took)
    finally:
        proxy.restore()
        server.stop()
