"""Writes beside the event log whose commit answer is lost, on a real PostgreSQL: every answer is
true.

Keys, event tickets and webhook subscriptions are rows beside the log, each written in a
transaction of its own. The server (or the `titen keys` command) reaches PostgreSQL through a
TCP proxy (tests/tcp_proxy.py) that closes the connection of the command's transaction at its
COMMIT, after delivering it (the commit lands, its answer never reaches titen) or instead of
delivering it (nothing lands). Each answer must match the store: success and the change made
once when it landed, 503 (exit status 75 for a command) and no change when it did not, and a
retry with the same Idempotency-Key gets the original outcome. Before, a lost answer was 503
whether or not the change had been made.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support import Http, Server, create_key, eventually, titen
from tests.tcp_proxy import TcpProxy

HOOK = {"url": "http://127.0.0.1:9/hook"}
LEASE = {"purpose": "p", "ttl_seconds": 60, "resource_type": "deploy", "resource_id": "r"}
LANDS = pytest.mark.parametrize("lands", [True, False], ids=["commit-lands", "commit-lost"])


class Store:
    """The database read directly, as an operator would: what really committed."""

    def __init__(self, url: str):
        self.conninfo = url.split("?", 1)[0]
        self.schema = url.rsplit("schema=", 1)[1]

    def rows(self, statement: str, *params: Any) -> list[tuple]:
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            cursor = conn.execute(statement.replace("{s}", f'"{self.schema}"'), params)
            return cursor.fetchall() if cursor.description else []


@pytest.fixture
def served(postgres_database, proxied) -> Iterator[tuple[TcpProxy, Http, Store]]:
    proxy, through_proxy = proxied
    alice = create_key(postgres_database, "acme", "agent_alice")
    server = Server(through_proxy, 4, "--allow-private-webhooks")
    try:
        yield proxy, Http(server.url, alice), Store(postgres_database)
    finally:
        server.stop()


def once(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def unavailable(status: int, body: dict | None) -> bool:
    return status == 503 and body is not None and body["error"]["code"] == "UNAVAILABLE"


def webhook(http: Http) -> str:
    status, body = http.request("POST", "/v1/webhooks", HOOK)
    assert status == 201, body
    return body["data"]["webhook_id"]


@LANDS
def test_a_webhook_created_as_its_commit_answer_is_lost(served, lands):
    proxy, alice, store = served
    proxy.cut_at_commit(deliver=lands, after=b'"webhooks" VALUES')
    status, body = alice.request("POST", "/v1/webhooks", HOOK, headers=once("w1"))
    assert proxy.commits_cut == 1
    made = [row[0] for row in store.rows("SELECT webhook_id FROM {s}.webhooks")]
    if lands:
        assert status == 201, body
        assert made == [body["data"]["webhook_id"]]
    else:
        assert unavailable(status, body), body
        assert made == []
    again, replay = alice.request("POST", "/v1/webhooks", HOOK, headers=once("w1"))
    assert again == 201, replay
    if lands:
        assert replay["data"]["webhook_id"] == body["data"]["webhook_id"]
    assert len(store.rows("SELECT webhook_id FROM {s}.webhooks")) == 1


@LANDS
def test_a_secret_rotated_as_its_commit_answer_is_lost(served, lands):
    proxy, alice, store = served
    hook = webhook(alice)
    [(before,)] = store.rows("SELECT secret FROM {s}.webhooks")
    proxy.cut_at_commit(deliver=lands, after=b'"webhooks" SET secret')
    path = f"/v1/webhooks/{hook}/rotate-secret"
    status, body = alice.request("POST", path, headers=once("r1"))
    assert proxy.commits_cut == 1
    [(after,)] = store.rows("SELECT secret FROM {s}.webhooks")
    if lands:
        assert status == 200, body
        assert after == body["data"]["secret"] != before
    else:
        assert unavailable(status, body), body
        assert after == before
    assert alice.request("POST", path, headers=once("r1"))[0] == 200
    if lands:  # replayed, not rotated again
        assert store.rows("SELECT secret FROM {s}.webhooks") == [(after,)]


@LANDS
def test_a_webhook_enabled_as_its_commit_answer_is_lost(served, lands):
    proxy, alice, store = served
    hook = webhook(alice)
    store.rows("UPDATE {s}.consumers SET status = 'failing', failures = 7 WHERE name = %s", hook)
    proxy.cut_at_commit(deliver=lands, after=b'"consumers" SET status')
    status, body = alice.request("POST", f"/v1/webhooks/{hook}/enable", headers=once("e1"))
    assert proxy.commits_cut == 1
    [(now,)] = store.rows("SELECT status FROM {s}.consumers WHERE name = %s", hook)
    if lands:
        assert status == 200 and body["data"]["status"] == "active", body
        assert now == "active"
    else:
        assert unavailable(status, body), body
        assert now == "failing"
    assert alice.request("POST", f"/v1/webhooks/{hook}/enable", headers=once("e1"))[0] == 200
    assert alice.request("GET", f"/v1/webhooks/{hook}")[1]["data"]["status"] == "active"


@LANDS
def test_a_webhook_deleted_as_its_commit_answer_is_lost(served, lands):
    proxy, alice, _ = served
    hook = webhook(alice)
    proxy.cut_at_commit(deliver=lands, after=b'"webhooks" WHERE webhook_id = $1 RETURNING')
    status, body = alice.request("DELETE", f"/v1/webhooks/{hook}")
    assert proxy.commits_cut == 1
    still_there = alice.request("GET", f"/v1/webhooks/{hook}")[0]
    if lands:
        assert status == 200, body
        assert still_there == 404
    else:
        assert unavailable(status, body), body
        assert still_there == 200
        assert alice.request("DELETE", f"/v1/webhooks/{hook}")[0] == 200


@LANDS
def test_a_ticket_issued_as_its_commit_answer_is_lost(served, lands):
    proxy, alice, store = served
    proxy.cut_at_commit(deliver=lands, after=b'"event_tickets" VALUES')
    status, body = alice.request("POST", "/v1/events/tickets")
    assert proxy.commits_cut == 1
    issued = store.rows("SELECT COUNT(*) FROM {s}.event_tickets")[0][0]
    if lands:
        assert status == 201, body
        assert issued == 1
        ticket = body["data"]["ticket"]
        assert (
            Http(f"http://{alice.host}:{alice.port}").request("GET", f"/v1/events?ticket={ticket}")[
                0
            ]
            == 200
        )
    else:
        assert unavailable(status, body), body
        assert issued == 0


@LANDS
def test_a_key_created_as_its_commit_answer_is_lost(postgres_database, proxied, lands):
    proxy, through_proxy = proxied
    store = Store(postgres_database)
    proxy.cut_at_commit(deliver=lands, after=b'"api_keys" VALUES')
    made = titen(
        "keys",
        "create",
        "--org",
        "acme",
        "--principal",
        "agent_bob",
        database=through_proxy,
        check=False,
    )
    assert proxy.commits_cut == 1
    keys = store.rows("SELECT key_prefix FROM {s}.api_keys WHERE principal = 'agent_bob'")
    if lands:
        assert made.returncode == 0, made.stderr
        assert keys == [(made.stdout.strip()[: len(keys[0][0])],)]
    else:
        assert made.returncode == 75, made.stderr
        assert "unavailable" in made.stderr and "Traceback" not in made.stderr
        assert keys == []


@LANDS
def test_keys_revoked_as_the_commit_answer_is_lost(postgres_database, proxied, lands):
    proxy, through_proxy = proxied
    store = Store(postgres_database)
    create_key(postgres_database, "acme", "agent_bob")
    proxy.cut_at_commit(deliver=lands, after=b'"api_key_revision" SET')
    revoked = titen(
        "keys",
        "revoke",
        "--org",
        "acme",
        "--principal",
        "agent_bob",
        database=through_proxy,
        check=False,
    )
    assert proxy.commits_cut == 1
    live = store.rows("SELECT 1 FROM {s}.api_keys WHERE revoked_at IS NULL")
    if lands:
        assert revoked.returncode == 0, revoked.stderr
        assert live == []
    else:
        assert revoked.returncode == 75, revoked.stderr
        assert live == [(1,)]


@pytest.mark.parametrize("command", ["acquire", "webhook"])
def test_an_outcome_that_cannot_be_learnt_is_answered_so_and_its_key_returns_it(served, command):
    """The COMMIT lands, its answer is lost, and the database is gone before titen can ask what
    landed: the 503 says the outcome is unknown, and the same request retried with its key once
    the database is back returns the original outcome, made once."""
    proxy, alice, store = served
    path, body, after, made = {
        "acquire": ("/v1/leases", LEASE, None, "SELECT lease_id FROM {s}.lease_index"),
        "webhook": (
            "/v1/webhooks",
            HOOK,
            b'"webhooks" VALUES',
            "SELECT webhook_id FROM {s}.webhooks",
        ),
    }[command]
    proxy.cut_at_commit(deliver=True, after=after, then_cut=True)
    status, answer = alice.request("POST", path, body, headers=once("u1"))
    assert proxy.commits_cut == 1
    assert status == 503 and answer["error"]["code"] == "OUTCOME_UNKNOWN", answer
    assert "could not tell" in answer["error"]["message"], answer
    proxy.restore()
    replies: list[tuple[int, dict | None]] = []
    eventually(
        lambda: (
            replies.append(alice.request("POST", path, body, headers=once("u1")))
            or replies[-1][0] // 100 == 2
        ),
        "the keyed retry is answered once the database is back",
    )
    [(saved,)] = store.rows(made)
    assert saved == replies[-1][1]["data"]["lease_id" if command == "acquire" else "webhook_id"]
