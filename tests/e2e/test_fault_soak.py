"""A soak on a real PostgreSQL: titen's connections are killed at random moments under load, and
every answer is checked against the log, request by request.

`titen serve --workers 2` serves acquires and releases, handoff creations and resolutions (half
of them with an Idempotency-Key) from several client threads, while a killer ends every
PostgreSQL session of the server's workers (`pg_terminate_backend`) every 0.1 to 0.5 s. Then
the organization's log, read as an operator reads it (`titen audit export`), must hold for each
request exactly what its answer said: one change per 2xx, none per 503 (at most one when the
503 said the outcome could not be told, and then a retry with the same key returns the
original), no 404 for a release that committed, and no 500 at all. Each request touches an
item of its own (a resource, a subject), so its events are found by that item.

Before the fix the library retried an insert whose commit had landed, met its own events as a
lost race, and ran the command again: one 201 with two leases, 503s that had changed state.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from tests.support import Http, Server, child_pids, create_key, eventually, titen

SOAK_SECONDS = 20.0
CLIENTS = 6
LEASE = {"purpose": "p", "ttl_seconds": 600, "resource_type": "deploy"}
UNKNOWN = "OUTCOME_UNKNOWN"
RETRY_SECONDS = 30.0
"""How long a keyed request answered 503 is retried once the faults have stopped."""


@dataclass
class Call:
    """One request and its answer."""

    kind: str  # acquire, release, create, resolve
    item: str  # the resource, lease, subject or handoff it is about
    body: Any
    key: str | None
    status: int = 0
    answer: dict = field(default_factory=dict)

    @property
    def unknown(self) -> bool:
        """A 503 that said the outcome could not be told."""
        return self.status == 503 and self.answer.get("error", {}).get("code") == UNKNOWN


class Killer:
    """Ends every PostgreSQL session of the server's workers, at random moments."""

    def __init__(self, database: str, server: Server, pause: tuple[float, float] = (0.1, 0.5)):
        """`pause`: the range of seconds between two rounds of kills."""
        self.conninfo = database.split("?", 1)[0]
        self.server = server
        self.pause = pause
        self.kills = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        eventually(self._serving, "both workers serve", timeout=60)

    def _serving(self) -> bool:
        """Whether both workers have opened their store and serve: each LISTENs once it does
        (a worker killed while it opens its store would exit and be replaced, a test of
        something else)."""
        names = [f"titen {pid}" for pid in child_pids(self.server.process.pid)]
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            listening = conn.execute(
                "SELECT count(DISTINCT application_name) FROM pg_stat_activity"
                " WHERE application_name = ANY(%s) AND query LIKE 'LISTEN%%'",
                [names],
            ).fetchone()
        return len(names) == 2 and listening is not None and listening[0] == 2

    def _run(self) -> None:
        chance = random.Random()
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            while not self.stop.wait(chance.uniform(*self.pause)):
                names = [f"titen {pid}" for pid in child_pids(self.server.process.pid)]
                ended = conn.execute(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM"
                    " pg_stat_activity WHERE application_name = ANY(%s)",
                    [names],
                ).fetchone()
                self.kills += ended[0] if ended else 0


def client(number: int, alice: Http, bob: Http, until: float, calls: list[Call]) -> None:
    """Acquire, release, create and resolve in turn, each on an item of its own."""
    chance = random.Random(number)
    held: list[str] = []
    pending: list[str] = []
    serial = 0
    while time.monotonic() < until:
        serial += 1
        name = f"c{number}-{serial}"
        key = name if chance.random() < 0.5 else None
        headers = {"Idempotency-Key": key} if key else None
        step = chance.choice(
            ["acquire", "create"] + ["release"] * bool(held) + ["resolve"] * bool(pending)
        )
        if step == "acquire":
            call = Call("acquire", name, {**LEASE, "resource_id": name}, key)
            call.status, call.answer = alice.request(
                "POST", "/v1/leases", call.body, headers=headers
            )
            if call.status == 201:
                held.append(call.answer["data"]["lease_id"])
        elif step == "release":
            lease = held.pop(chance.randrange(len(held)))
            call = Call("release", lease, None, None)
            call.status, call.answer = alice.request("DELETE", f"/v1/leases/{lease}")
        elif step == "create":
            call = Call("create", name, {"to_principal": "agent_bob", "subject_id": name}, key)
            call.status, call.answer = alice.request(
                "POST", "/v1/handoffs", call.body, headers=headers
            )
            if call.status == 201:
                pending.append(call.answer["data"]["handoff_id"])
        else:
            handoff = pending.pop(chance.randrange(len(pending)))
            call = Call(
                "resolve", handoff, {"status": chance.choice(["accepted", "rejected"])}, key
            )
            call.status, call.answer = bob.request(
                "POST", f"/v1/handoffs/{handoff}/resolve", call.body, headers=headers
            )
        calls.append(call)


def exported(database: str) -> list[dict]:
    """The organization's events, as `titen audit export` gives them to an operator."""
    lines = titen("audit", "export", "--org", "acme", database=database).stdout.splitlines()
    return [record for line in lines if (record := json.loads(line))["record"] == "event"]


def changes(events: list[dict], call: Call) -> list[dict]:
    """The events that record the change `call` asked for."""
    hexed = call.item.rsplit("_", 1)[-1]
    wanted = {
        "acquire": lambda e: (
            e["type"] == "lease.acquired" and e["payload"]["resource_id"] == call.item
        ),
        "release": lambda e: (
            e["type"] == "lease.released" and e["payload"]["lease_id"] == call.item
        ),
        "create": lambda e: (
            e["type"] == "handoff.created" and e["payload"]["subject_id"] == call.item
        ),
        "resolve": lambda e: (
            e["type"] in ("handoff.accepted", "handoff.rejected") and e["aggregate"] == hexed
        ),
    }[call.kind]
    return [event for event in events if wanted(event)]


def mismatch(call: Call, events: list[dict]) -> str | None:
    """What is wrong with a call's answer, given the log; None when it tells the truth."""
    found = changes(events, call)
    if call.status // 100 == 2:
        if len(found) == 1 and matches(call, found[0]):
            return None
        return f"answered {call.status}, {len(found)} changes in the log"
    if call.status == 503 and (not found or (call.unknown and len(found) == 1)):
        return None
    return f"answered {call.status}, {len(found)} changes in the log"


def matches(call: Call, event: dict) -> bool:
    """Whether a 2xx answer names the change the log holds."""
    data = call.answer["data"]
    if call.kind == "acquire":
        return bool(data["lease_id"] == event["payload"]["lease_id"])
    if call.kind == "create":
        return bool(data["handoff_id"].rsplit("_", 1)[-1] == event["aggregate"])
    return True


def described(call: Call, verdict: str) -> str:
    return (
        f"{call.kind} {call.item} (key {call.key}) answered {call.status} {call.answer}: {verdict}"
    )


def replay(call: Call, alice: Http, bob: Http) -> tuple[int, dict | None]:
    """The same keyed request again, until it is answered with other than 503 (a connection the
    killer ended while it sat in the pool fails the first request that takes it): safe, since
    its key makes it run at most once."""
    headers = {"Idempotency-Key": call.key or ""}
    if call.kind == "acquire":
        return until_answered(
            lambda: alice.request("POST", "/v1/leases", call.body, headers=headers)
        )
    if call.kind == "create":
        return until_answered(
            lambda: alice.request("POST", "/v1/handoffs", call.body, headers=headers)
        )
    path = f"/v1/handoffs/{call.item}/resolve"
    return until_answered(lambda: bob.request("POST", path, call.body, headers=headers))


def until_answered(request: Callable[[], tuple[int, Any]]) -> tuple[int, Any]:
    """`request()` repeated while it answers 503, for at most RETRY_SECONDS."""

    def answered() -> tuple[int, Any] | None:
        status, answer = request()
        return None if status == 503 else (status, answer)

    return eventually(answered, "an answer other than 503", RETRY_SECONDS, every=0.1)


def test_every_answer_matches_the_log_while_connections_are_killed(postgres_database):
    alice_key = create_key(postgres_database, "acme", "agent_alice")
    bob_key = create_key(postgres_database, "acme", "agent_bob")
    server = Server(postgres_database, 8, "--workers", "2")
    try:
        alice, bob = Http(server.url, alice_key), Http(server.url, bob_key)
        killer = Killer(postgres_database, server)
        calls: list[Call] = []
        until = time.monotonic() + SOAK_SECONDS
        clients = [
            threading.Thread(target=client, args=(n, alice, bob, until, calls))
            for n in range(CLIENTS)
        ]
        killer.thread.start()
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        killer.stop.set()
        killer.thread.join()

        answered = Counter(call.status for call in calls)
        events = exported(postgres_database)
        wrong = [described(call, verdict) for call in calls if (verdict := mismatch(call, events))]
        retried = [call for call in calls if call.key and call.status == 503]
        for call in retried:  # each keyed 503 retried: it runs once, or replays its original
            before = changes(events, call)
            call.status, call.answer = replay(call, alice, bob)
            if call.status // 100 != 2 or (before and not matches(call, before[0])):
                wrong.append(described(call, "a retry with its key: not the original outcome"))
        events = exported(postgres_database)
        wrong += [
            described(call, "retried with its key: not once in the log")
            for call in retried
            if len(changes(events, call)) != 1
        ]
        assert not wrong, (wrong[:10], answered)
        assert killer.kills >= SOAK_SECONDS, killer.kills  # the faults did happen
        assert answered[201] > 20 and answered[503] > 0, answered  # it ran, and it hurt
        log = server.log_so_far()
        assert "Traceback" not in log, log[max(0, log.find("Traceback") - 2000) :][:8000]
    finally:
        server.stop()
