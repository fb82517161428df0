"""One clock: `titen serve` nodes whose own clocks are minutes off (Debian's libfaketime), on
one PostgreSQL database, decide and record by the database's clock.

A node 5 minutes fast must not take a live lease as expired; a node 5 minutes slow must not
record instants 5 minutes early (docs/deployment.md#clocks). Only the wall clock is faked:
`time.monotonic()` stays true (DONT_FAKE_MONOTONIC), as it does on a host whose clock is wrong.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from datetime import datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from tests.support import Http, Server, create_key, titen
from titen.domain.clock import parse_iso

LEASE = {"resource_type": "deploy", "resource_id": "skewed", "purpose": "p", "ttl_seconds": 60}
AGREES_WITHIN = timedelta(seconds=2)
"""How far a recorded instant may be from the database's clock read around the request: the
request's own duration, on a loaded machine."""


def faketime(offset: str) -> dict[str, str]:
    """The environment that runs a process with its wall clock `offset` ("+5m", "-5m") off."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        if os.environ.get("CI"):
            pytest.fail("libfaketime is not installed (.ci/run installs faketime)")
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    return {"LD_PRELOAD": found[0], "FAKETIME": offset, "DONT_FAKE_MONOTONIC": "1"}


def database_now(url: str) -> datetime:
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def table(url: str, name: str) -> str:
    """A titen table of the store at `url`, qualified by its schema."""
    return f'"{parse_qs(urlsplit(url).query)["schema"][0]}".{name}'


class Window:
    """The database's clock read before and after something: what it recorded must fall in
    between (with AGREES_WITHIN of slack for the truncation to milliseconds and the load)."""

    def __init__(self, url: str):
        self.url = url

    def __enter__(self) -> Window:
        self.start = database_now(self.url)
        return self

    def __exit__(self, *_: object) -> None:
        self.end = database_now(self.url)

    def holds(self, instant: str | datetime, later: timedelta = timedelta(0)) -> bool:
        at = parse_iso(instant) if isinstance(instant, str) else instant
        return self.start + later - AGREES_WITHIN <= at <= self.end + later + AGREES_WITHIN


@pytest.fixture
def nodes(postgres_database: str) -> Iterator[dict[str, Server]]:
    """Three nodes on one database: one true, one 5 minutes fast, one 5 minutes slow."""
    offsets = {"true": None, "fast": faketime("+5m"), "slow": faketime("-5m")}
    started: dict[str, Server] = {}
    try:
        for name, env in offsets.items():
            started[name] = Server(postgres_database, 4, env=env)
        yield started
    finally:
        for server in started.values():
            server.stop()


def test_a_fast_node_does_not_take_a_live_lease_as_expired(nodes):
    database = nodes["true"].database
    alice = create_key(database, "acme", "agent_alice")
    bob = create_key(database, "acme", "agent_bob")
    status, body = Http(nodes["true"].url, alice).request("POST", "/v1/leases", LEASE)
    assert status == 201, body
    held = body["data"]

    status, body = Http(nodes["fast"].url, bob).request("POST", "/v1/leases", LEASE)

    assert status == 409, body  # not 201 with fencing token 2 while alice's lease is live
    assert held["expires_at"] in body["error"]["message"]
    status, body = Http(nodes["fast"].url, alice).request("GET", f"/v1/leases/{held['lease_id']}")
    assert status == 200, body
    assert body["data"]["fencing_token"] == 1


def test_a_slow_node_records_the_database_s_instants(nodes):
    database = nodes["slow"].database
    alice = create_key(database, "acme", "agent_alice")
    target = create_key(database, "acme", "agent_target")
    slow = Http(nodes["slow"].url, alice)

    with Window(database) as acquired:
        status, body = slow.request(
            "POST", "/v1/leases", LEASE, headers={"Idempotency-Key": "once"}
        )
    assert status == 201, body
    assert acquired.holds(body["data"]["expires_at"], later=timedelta(seconds=60))
    status, body = slow.request("GET", f"/v1/leases/{body['data']['lease_id']}")
    lease = body["data"]
    assert acquired.holds(lease["acquired_at"])
    with psycopg.connect(database.split("?")[0], autocommit=True) as conn:
        (kept_until,) = conn.execute(
            f"SELECT expires_at FROM {table(database, 'idempotent_answers')}"
        ).fetchone()
    answer_expiry = datetime.fromtimestamp(kept_until / 1000, acquired.start.tzinfo)
    assert acquired.holds(answer_expiry, later=timedelta(hours=24))

    with Window(database) as released:
        status, body = slow.request("DELETE", f"/v1/leases/{lease['lease_id']}")
    assert status == 200, body
    assert released.holds(body["data"]["released_at"])

    with Window(database) as created:
        status, body = slow.request(
            "POST", "/v1/handoffs", {"to_principal": "agent_target", "subject_id": "s"}
        )
    assert status == 201, body
    status, body = slow.request("GET", f"/v1/handoffs/{body['data']['handoff_id']}")
    handoff = body["data"]
    assert created.holds(handoff["created_at"])
    with Window(database) as resolved:
        status, body = Http(nodes["slow"].url, target).request(
            "POST", f"/v1/handoffs/{handoff['handoff_id']}/resolve", {"status": "accepted"}
        )
    assert status == 200, body
    assert resolved.holds(body["data"]["resolved_at"])

    # The library's own stamp on each event (the audit's `time`) is the same instant.
    exported = titen("audit", "export", "--org", "acme", database=database).stdout
    lines = [json.loads(line) for line in exported.splitlines()]
    times = {line["type"]: line["time"] for line in lines if line["record"] == "event"}
    assert times["lease.acquired"] == lease["acquired_at"]
    assert times["handoff.created"] == handoff["created_at"]


def test_keys_and_tickets_made_on_skewed_nodes_live_by_the_database_s_clock(nodes):
    database = nodes["slow"].database
    with Window(database) as made:
        key = create_key_skewed(database, "-5m")
    with psycopg.connect(database.split("?")[0], autocommit=True) as conn:
        (created_at,) = conn.execute(
            f"SELECT created_at FROM {table(database, 'api_keys')}"
        ).fetchone()
    assert made.holds(created_at)

    with Window(database) as issued:
        status, body = Http(nodes["slow"].url, key).request("POST", "/v1/events/tickets")
    assert status == 201, body
    assert issued.holds(body["data"]["expires_at"], later=timedelta(minutes=10))
    ticket = body["data"]["ticket"]
    # The fast node is 10 minutes ahead of the one that issued it: by its own clock the ticket
    # would be over already.
    status, body = Http(nodes["fast"].url).request("GET", f"/v1/events?ticket={ticket}")
    assert status == 200, body

    with Window(database) as revoked:
        titen(
            "keys", "revoke", "--org", "acme", "--principal", "agent_skewed",
            database=database, env=faketime("+5m"),
        )  # fmt: skip
    with psycopg.connect(database.split("?")[0], autocommit=True) as conn:
        (revoked_at,) = conn.execute(
            f"SELECT revoked_at FROM {table(database, 'api_keys')}"
        ).fetchone()
    assert revoked.holds(revoked_at)


def create_key_skewed(database: str, offset: str) -> str:
    """`titen keys create` run with its clock `offset` off."""
    return titen(
        "keys", "create", "--org", "acme", "--principal", "agent_skewed", "--role", "agent",
        database=database, env=faketime(offset),
    ).stdout.strip()  # fmt: skip
