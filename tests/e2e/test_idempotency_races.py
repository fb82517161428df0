"""Identical keyed requests at the same moment run once: real servers, real threads.

20 clients send the same acquire (or handoff) with one Idempotency-Key at once, to one server on
each backend and, on PostgreSQL, split across two server processes. Exactly one event is
recorded, and every client gets the same answer (19 of them replayed).
"""

from __future__ import annotations

import http.client
import json
import threading

import pytest

from tests.support import Http, Server, create_key

CLIENTS = 20
ACQUIRE = {"resource_type": "deploy", "resource_id": "svc", "purpose": "p", "ttl_seconds": 600}


def send(url: str, key: str, path: str, body: dict, idempotency_key: str) -> tuple[int, dict, bool]:
    host, _, port = url.removeprefix("http://").partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(body),
            headers={
                "authorization": f"Bearer {key}",
                "content-type": "application/json",
                "idempotency-key": idempotency_key,
            },
        )
        response = conn.getresponse()
        answer = json.loads(response.read())
        return response.status, answer, response.getheader("idempotent-replayed") == "true"
    finally:
        conn.close()


def at_once(urls: list[str], key: str, path: str, body: dict) -> list[tuple[int, dict, bool]]:
    start = threading.Barrier(CLIENTS)
    results: list[tuple[int, dict, bool]] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        start.wait()
        result = send(urls[n % len(urls)], key, path, body, "one-logical-call")
        with lock:
            results.append(result)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.fixture
def keys(database) -> tuple[str, str]:
    return create_key(database, "acme", "agent_alice"), create_key(database, "acme", "agent_bob")


@pytest.fixture
def one_server(database, keys, serve) -> list[Server]:
    return [serve(database, threads=16)]


@pytest.fixture
def two_servers(postgres_database, serve) -> tuple[list[Server], str, str]:
    alice = create_key(postgres_database, "acme", "agent_alice")
    bob = create_key(postgres_database, "acme", "agent_bob")
    return [serve(postgres_database, threads=16) for _ in range(2)], alice, bob


def assert_ran_once(results: list[tuple[int, dict, bool]], status: int) -> dict:
    assert [r[0] for r in results] == [status] * CLIENTS, results
    answers = {json.dumps(r[1], sort_keys=True) for r in results}
    assert len(answers) == 1, answers
    assert sorted(r[2] for r in results) == [False] + [True] * (CLIENTS - 1)
    return results[0][1]


def published(url: str, key: str, kind: str) -> list[dict]:
    return Http(url, key).request("GET", f"/v1/events?types={kind}")[1]["data"]["events"]


def test_twenty_identical_acquires_make_one_lease(one_server, keys):
    alice, _ = keys
    url = one_server[0].url
    answer = assert_ran_once(at_once([url], alice, "/v1/leases", ACQUIRE), 201)
    events = published(url, alice, "lease.acquired")
    assert [e["data"]["lease_id"] for e in events] == [answer["data"]["lease_id"]]


def test_twenty_identical_handoffs_make_one_handoff(one_server, keys):
    alice, bob = keys
    url = one_server[0].url
    body = {"to_principal": "agent_bob", "subject_id": "user_rama"}
    answer = assert_ran_once(at_once([url], alice, "/v1/handoffs", body), 201)
    inbox = Http(url, bob).request("GET", "/v1/handoffs")[1]["data"]["handoffs"]
    assert [h["handoff_id"] for h in inbox] == [answer["data"]["handoff_id"]]


def test_twenty_identical_acquires_across_two_processes_make_one_lease(two_servers):
    servers, alice, _ = two_servers
    urls = [server.url for server in servers]
    answer = assert_ran_once(at_once(urls, alice, "/v1/leases", ACQUIRE), 201)
    events = published(urls[0], alice, "lease.acquired")
    assert [e["data"]["lease_id"] for e in events] == [answer["data"]["lease_id"]]


def test_twenty_identical_handoffs_across_two_processes_make_one(two_servers):
    servers, alice, bob = two_servers
    urls = [server.url for server in servers]
    body = {"to_principal": "agent_bob", "subject_id": "user_rama"}
    answer = assert_ran_once(at_once(urls, alice, "/v1/handoffs", body), 201)
    inbox = Http(urls[1], bob).request("GET", "/v1/handoffs")[1]["data"]["handoffs"]
    assert [h["handoff_id"] for h in inbox] == [answer["data"]["handoff_id"]]


def test_the_same_key_with_two_bodies_at_once_runs_one_of_them(one_server, keys):
    alice, _ = keys
    url = one_server[0].url
    start = threading.Barrier(CLIENTS)
    results: list[tuple[int, dict, bool]] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        body = {**ACQUIRE, "purpose": f"variant {n % 2}"}
        start.wait()
        result = send(url, alice, "/v1/leases", body, "contested")
        with lock:
            results.append(result)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted({r[0] for r in results})
    assert statuses == [201, 422], results
    refused = [r[1]["error"]["code"] for r in results if r[0] == 422]
    assert set(refused) == {"IDEMPOTENCY_KEY_REUSED"}
    granted = {json.dumps(r[1], sort_keys=True) for r in results if r[0] == 201}
    assert len(granted) == 1
    assert len(published(url, alice, "lease.acquired")) == 1
