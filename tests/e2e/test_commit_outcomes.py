"""Commits whose answer is lost, on a real server and a real PostgreSQL: every answer is true.

The server reaches PostgreSQL through a TCP proxy (tests/tcp_proxy.py) that closes a
connection at its next COMMIT, either after delivering it (the commit lands, its answer never
reaches titen) or instead of delivering it (nothing lands). For each command the answer must
match the store: 2xx and exactly one change when the commit landed, 503 and no change when it
did not, and the same Idempotency-Key retried afterwards gets the original outcome. The library
used to retry such an insert, meet its own events as a lost race and run the command again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support import Http, Server, create_key

LEASE = {"purpose": "p", "ttl_seconds": 60, "resource_type": "deploy"}


@pytest.fixture
def served(postgres_database, proxied) -> Iterator[tuple[object, Server, Http, Http]]:
    proxy, through_proxy = proxied
    alice = create_key(postgres_database, "acme", "agent_alice")
    bob = create_key(postgres_database, "acme", "agent_bob")
    server = Server(through_proxy, 4)
    try:
        yield proxy, server, Http(server.url, alice), Http(server.url, bob)
    finally:
        server.stop()


def acquired(http: Http, resource: str) -> list[dict]:
    """The lease.acquired events of one resource in the organization's log."""
    status, page = http.request("GET", "/v1/events?limit=500&types=lease.acquired")
    assert status == 200
    return [e for e in page["data"]["events"] if e["data"]["resource_id"] == resource]


def created(http: Http, subject: str) -> list[dict]:
    status, page = http.request("GET", "/v1/events?limit=500&types=handoff.created")
    assert status == 200
    return [e for e in page["data"]["events"] if e["data"]["subject_id"] == subject]


def resolved(http: Http, handoff: str) -> list[dict]:
    status, page = http.request(
        "GET", "/v1/events?limit=500&types=handoff.accepted,handoff.rejected"
    )
    assert status == 200
    return [e for e in page["data"]["events"] if e["subject"] == handoff]


def once(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


@pytest.mark.parametrize("lands", [True, False], ids=["commit-lands", "commit-lost"])
def test_an_acquire_whose_commit_answer_is_lost_answers_what_the_store_holds(served, lands):
    proxy, _, alice, _ = served
    proxy.cut_at_commit(deliver=lands)
    status, body = alice.request(
        "POST", "/v1/leases", {**LEASE, "resource_id": "r"}, headers=once("k1")
    )
    assert proxy.commits_cut == 1
    events = acquired(alice, "r")
    if lands:
        assert status == 201, body
        assert [e["data"]["lease_id"] for e in events] == [body["data"]["lease_id"]]
        assert events[0]["data"]["fencing_token"] == 1
    else:
        assert status == 503 and body["error"]["code"] == "UNAVAILABLE", body
        assert events == []
    again, replay = alice.request(
        "POST", "/v1/leases", {**LEASE, "resource_id": "r"}, headers=once("k1")
    )
    assert again == 201
    if lands:
        assert replay["data"]["lease_id"] == body["data"]["lease_id"]
    assert len(acquired(alice, "r")) == 1


@pytest.mark.parametrize("lands", [True, False], ids=["commit-lands", "commit-lost"])
def test_a_release_whose_commit_answer_is_lost_answers_what_the_store_holds(served, lands):
    proxy, _, alice, _ = served
    status, body = alice.request("POST", "/v1/leases", {**LEASE, "resource_id": "r"})
    assert status == 201
    lease = body["data"]["lease_id"]
    proxy.cut_at_commit(deliver=lands)
    status, body = alice.request("DELETE", f"/v1/leases/{lease}")
    assert proxy.commits_cut == 1
    still_held = alice.request("GET", f"/v1/leases/{lease}")[0] == 200
    if lands:
        assert status == 200, body
        assert not still_held
    else:
        assert status == 503, body
        assert still_held
        assert alice.request("DELETE", f"/v1/leases/{lease}")[0] == 200


@pytest.mark.parametrize("lands", [True, False], ids=["commit-lands", "commit-lost"])
def test_a_handoff_whose_commit_answer_is_lost_answers_what_the_store_holds(served, lands):
    proxy, _, alice, bob = served
    handoff = {"to_principal": "agent_bob", "subject_id": "s1"}
    proxy.cut_at_commit(deliver=lands)
    status, body = alice.request("POST", "/v1/handoffs", handoff, headers=once("h1"))
    assert proxy.commits_cut == 1
    events = created(alice, "s1")
    if lands:
        assert status == 201, body
        assert [e["subject"] for e in events] == [body["data"]["handoff_id"]]
    else:
        assert status == 503, body
        assert events == []
    again, replay = alice.request("POST", "/v1/handoffs", handoff, headers=once("h1"))
    assert again == 201
    assert len(created(alice, "s1")) == 1
    handoff_id = replay["data"]["handoff_id"]

    proxy.cut_at_commit(deliver=lands)
    resolve: Callable[[], tuple[int, dict]] = lambda: bob.request(  # noqa: E731
        "POST", f"/v1/handoffs/{handoff_id}/resolve", {"status": "accepted"}, headers=once("r1")
    )
    status, body = resolve()
    assert proxy.commits_cut == 2
    if lands:
        assert status == 200, body
        assert len(resolved(alice, handoff_id)) == 1
    else:
        assert status == 503, body
        assert resolved(alice, handoff_id) == []
    assert resolve()[0] == 200
    assert len(resolved(alice, handoff_id)) == 1
