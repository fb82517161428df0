"""The soak of tests/e2e/test_fault_soak.py for the writes beside the event log: webhook
subscriptions (create, rotate, delete) and event tickets, each a transaction of its own that is
settled by its transaction's status when its COMMIT's answer is lost (storage/settle.py).

`titen serve --workers 2` serves them from several client threads while every PostgreSQL session
of its workers is killed every 0.1 to 0.5 s. Then the store, read directly as an operator would,
must hold what each answer said: a subscription per 201 and none per 503 (each creation has a URL
of its own), the secret a 200 rotation answered and the old one after a 503, no row after a 200
deletion and the row after a 503, a ticket row per 201 ticket and none per 503; a 503 that said
the outcome could not be told allows either, and a keyed creation answered 503 is retried with
its key to exactly one subscription.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import Counter
from functools import partial
from typing import Any

import psycopg

from tests.e2e.test_fault_soak import Call, Killer, until_answered
from tests.support import Http, Server, create_key

SOAK_SECONDS = 15.0
CLIENTS = 4
CREATES = 20
"""Subscriptions each client creates at most (a principal may hold 100)."""


def client(number: int, alice: Http, until: float, calls: list[Call]) -> None:
    """Create, rotate, delete and ask for tickets in turn; each subscription is rotated and
    deleted at most once, rotations before the deletion."""
    chance = random.Random(number)
    fresh: list[str] = []  # created, neither rotated nor deleted
    rotated: list[str] = []
    serial = creates = 0
    while time.monotonic() < until:
        serial += 1
        name = f"w{number}-{serial}"
        steps = ["ticket"] + ["create"] * (creates < CREATES)
        steps += ["rotate"] * bool(fresh) + ["delete"] * bool(fresh or rotated)
        step = chance.choice(steps)
        if step == "create":
            creates += 1
            key = name if chance.random() < 0.5 else None
            call = Call("create", f"http://127.0.0.1:9/{name}", None, key)
            call.body = {"url": call.item}
            headers = {"Idempotency-Key": key} if key else None
            call.status, call.answer = alice.request(
                "POST", "/v1/webhooks", call.body, headers=headers
            )
            if call.status == 201:
                fresh.append(call.answer["data"]["webhook_id"])
        elif step == "rotate":
            hook = fresh.pop(chance.randrange(len(fresh)))
            call = Call("rotate", hook, None, None)
            call.status, call.answer = alice.request("POST", f"/v1/webhooks/{hook}/rotate-secret")
            rotated.append(hook)
        elif step == "delete":
            pool = fresh if fresh and (not rotated or chance.random() < 0.5) else rotated
            hook = pool.pop(chance.randrange(len(pool)))
            call = Call("delete", hook, None, None)
            call.status, call.answer = alice.request("DELETE", f"/v1/webhooks/{hook}")
        else:
            call = Call("ticket", "", None, None)
            call.status, call.answer = alice.request("POST", "/v1/events/tickets")
        calls.append(call)


def stored(database: str) -> tuple[dict[str, tuple[str, str]], set[str]]:
    """The subscriptions by URL (their id and secret), and the hashes of the tickets."""
    schema = database.rsplit("schema=", 1)[1]
    with psycopg.connect(database.split("?", 1)[0]) as conn:
        hooks = conn.execute(f'SELECT url, webhook_id, secret FROM "{schema}".webhooks')
        found = {url: (hook, secret) for url, hook, secret in hooks.fetchall()}
        tickets = conn.execute(f'SELECT ticket_hash FROM "{schema}".event_tickets').fetchall()
    return found, {ticket for (ticket,) in tickets}


def mismatches(calls: list[Call], hooks: dict[str, tuple[str, str]], tickets: set[str]) -> list:
    """What the store holds against what was answered, call by call."""
    wrong: list[Any] = []

    def check(call: Call, holds: bool, verdict: str) -> None:
        if not holds and not call.unknown:
            wrong.append((call.kind, call.item, call.status, call.answer, verdict))

    by_id = {hook: (url, secret) for url, (hook, secret) in hooks.items()}
    created = {
        c.answer["data"]["webhook_id"]: c for c in calls if c.kind == "create" and c.status == 201
    }
    rotations = {c.item: c for c in calls if c.kind == "rotate"}
    deletions = {c.item: c for c in calls if c.kind == "delete"}
    for call in calls:
        if call.status not in (200, 201, 503):
            check(call, False, "answered neither 2xx nor 503")
        elif call.kind == "create" and call.status == 503:
            check(call, call.item not in hooks, "a refused creation is in the store")
        elif call.kind == "ticket" and call.status == 201:
            check(call, _hash(call.answer["data"]["ticket"]) in tickets, "no row for the ticket")
    for hook, made in created.items():
        deleted, rotation = deletions.get(hook), rotations.get(hook)
        if deleted is not None and deleted.status == 200:
            check(deleted, hook not in by_id, "deleted, yet in the store")
            continue
        if hook not in by_id:  # only an unknown deletion may have removed it
            check(deleted or made, False, "created and not deleted, yet not in the store")
            continue
        secret = by_id[hook][1]
        if rotation is None:
            check(made, secret == made.answer["data"]["secret"], "the secret changed")
        elif rotation.status == 200:
            check(rotation, secret == rotation.answer["data"]["secret"], "not the new secret")
        else:
            check(rotation, secret == made.answer["data"]["secret"], "a refused rotation landed")
    answered_tickets = sum(c.kind == "ticket" and c.status == 201 for c in calls)
    unknown_tickets = sum(c.kind == "ticket" and c.unknown for c in calls)
    if not answered_tickets <= len(tickets) <= answered_tickets + unknown_tickets:
        wrong.append(("tickets", len(tickets), answered_tickets, unknown_tickets))
    return wrong


def create(call: Call, alice: Http) -> tuple[int, Any]:
    """A keyed creation again."""
    return alice.request(
        "POST", "/v1/webhooks", call.body, headers={"Idempotency-Key": call.key or ""}
    )


def _hash(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


def test_every_answer_beside_the_log_matches_the_store_while_connections_are_killed(
    postgres_database,
):
    key = create_key(postgres_database, "acme", "agent_alice")
    server = Server(postgres_database, 8, "--workers", "2", "--allow-private-webhooks")
    try:
        alice = Http(server.url, key)
        killer = Killer(postgres_database, server)
        calls: list[Call] = []
        until = time.monotonic() + SOAK_SECONDS
        clients = [
            threading.Thread(target=client, args=(n, alice, until, calls)) for n in range(CLIENTS)
        ]
        killer.thread.start()
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        killer.stop.set()
        killer.thread.join()

        answered = Counter((call.kind, call.status) for call in calls)
        wrong = mismatches(calls, *stored(postgres_database))
        retried = [c for c in calls if c.kind == "create" and c.key and c.status == 503]
        for call in retried:
            status, answer = until_answered(partial(create, call, alice))
            hooks, _ = stored(postgres_database)
            if status != 201 or hooks.get(call.item, ("",))[0] != answer["data"]["webhook_id"]:
                wrong.append(("a keyed retry", call.item, status, answer))
        assert not wrong, (wrong[:10], answered)
        assert killer.kills >= SOAK_SECONDS, killer.kills
        assert answered["create", 201] > 10 and answered["ticket", 201] > 10, answered
        assert sum(n for (_, status), n in answered.items() if status == 503) > 0, answered
        log = server.log_so_far()
        assert "Traceback" not in log, log[max(0, log.find("Traceback") - 2000) :][:8000]
    finally:
        server.stop()
