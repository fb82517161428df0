"""No gap and no duplicate: what a reconnecting subscriber collects is exactly what committed."""

from __future__ import annotations

import json
import random
import threading

import psycopg
import pytest

from tests.support import EventStreamReader, Http, Server
from titen.domain.handoff import Handoff
from titen.domain.lease import Lease
from titen.service.bootstrap import bootstrap

PUBLIC = (Lease.Acquired, Handoff.Created, Handoff.Accepted, Handoff.Rejected)


def committed_public_ids(database: str, organization: str) -> list[str]:
    """The oracle: the organization's public events read from the event store itself."""
    services = bootstrap(database, pool_size=2)
    try:
        notifications = services.app.recorder.select_notifications(start=1, limit=10**6)
        events = map(services.app.mapper.to_domain_event, notifications)
        return [
            f"{e.originator_id.hex}-{e.originator_version}"
            for e in events
            if isinstance(e, PUBLIC) and e.organization == organization
        ]
    finally:
        services.close()


def make_keys(database: str) -> dict[str, str]:
    services = bootstrap(database, pool_size=2)
    try:
        names = [f"agent_{n}" for n in range(4)] + ["reader"]
        keys = {  # the reader follows the whole log: a dispatcher
            name: services.keys.create("acme", name, "dispatcher" if name == "reader" else "agent")
            for name in names
        }
        keys["outsider"] = services.keys.create("umbra", "agent_0", "agent")
        return keys
    finally:
        services.close()


def write(url: str, keys: dict[str, str], n: int, operations: int) -> None:
    """One writer: leases, handoffs to the next agent, and that agent's resolutions."""
    me, peer = Http(url, keys[f"agent_{n}"]), f"agent_{(n + 1) % 4}"
    outsider = Http(url, keys["outsider"])
    for i in range(operations):
        lease = {
            "resource_type": "t",
            "resource_id": f"{n}-{i % 3}",
            "purpose": "p",
            "ttl_seconds": 60,
        }
        assert me.request("POST", "/v1/leases", lease)[0] == 201
        outsider.request("POST", "/v1/leases", lease)
        status, body = me.request(
            "POST", "/v1/handoffs", {"to_principal": peer, "subject_id": f"s{i}"}
        )
        assert status == 201, body
        recipient = Http(url, keys[peer])
        decision = random.choice(["accepted", "rejected"])
        path = f"/v1/handoffs/{body['data']['handoff_id']}/resolve"
        assert recipient.request("POST", path, {"status": decision})[0] == 200


def follow(urls: list[str], key: str, writers_done: threading.Event, seed: int) -> list[str]:
    """Collect event ids, reconnecting at random points by stream and by long-poll."""
    rng, cursor, collected = random.Random(seed), "", []
    quiet_polls = 0
    while quiet_polls < 2:
        url = rng.choice(urls)
        if not writers_done.is_set() and rng.random() < 0.5:
            stream = EventStreamReader(url, key, last_event_id=cursor, timeout=0.5)
            try:
                for frame in stream.frames():
                    if "data" in frame:
                        event = json.loads(frame["data"])
                        collected.append(event["id"])
                        cursor = event["cursor"]
                        if rng.random() < 0.2:
                            break  # hang up mid-stream
            except TimeoutError:
                pass
            finally:
                stream.close()
            continue
        limit = rng.randint(1, 7)
        query = f"/v1/events?after={cursor}&limit={limit}&wait={rng.choice([0, 0.2])}"
        status, body = Http(url, key).request("GET", query)
        assert status == 200, body
        page = body["data"]
        collected += [e["id"] for e in page["events"]]
        cursor = page["next_cursor"]
        quiet_polls = quiet_polls + 1 if writers_done.is_set() and not page["events"] else 0
    return collected


def run(database: str, urls: list[str], operations: int) -> None:
    keys = make_keys(database)
    writers_done = threading.Event()
    writers = [
        threading.Thread(target=write, args=(urls[n % len(urls)], keys, n, operations))
        for n in range(4)
    ]
    for writer in writers:
        writer.start()
    result: list[list[str]] = []
    reader = threading.Thread(
        target=lambda: result.append(follow(urls, keys["reader"], writers_done, seed=7))
    )
    reader.start()
    for writer in writers:
        writer.join()
    writers_done.set()
    reader.join()
    committed = committed_public_ids(database, "acme")
    assert len(committed) == 4 * operations * 3
    assert_exactly(result[0], committed)


def assert_exactly(collected: list[str], committed: list[str]) -> None:
    assert len(collected) == len(set(collected)), "an event was delivered twice"
    missing = [e for e in committed if e not in set(collected)]
    assert not missing, f"{len(missing)} committed events were never delivered"
    assert collected == committed, "events were delivered out of commit order"


def test_a_reconnecting_follower_gets_exactly_the_committed_events(database):
    server = Server(database)
    try:
        run(database, [server.url], operations=12)
    finally:
        server.stop()


def test_exactly_once_with_writers_and_readers_on_two_server_processes(postgres_database):
    servers = [Server(postgres_database), Server(postgres_database)]
    try:
        run(postgres_database, [s.url for s in servers], operations=12)
    finally:
        for server in servers:
            server.stop()


def test_a_subscriber_resuming_after_a_restart_misses_nothing(database):
    keys = make_keys(database)
    server = Server(database)
    http = Http(server.url, keys["agent_0"])
    lease = {"resource_type": "t", "resource_id": "x", "purpose": "p", "ttl_seconds": 60}
    http.request("POST", "/v1/leases", lease)
    _, page = Http(server.url, keys["reader"]).request("GET", "/v1/events")
    cursor = page["data"]["next_cursor"]
    http.request("POST", "/v1/leases", {**lease, "resource_id": "y"})  # after the cursor
    server.kill()

    server = Server(database)
    try:
        Http(server.url, keys["agent_0"]).request(
            "POST", "/v1/leases", {**lease, "resource_id": "z"}
        )
        stream = EventStreamReader(server.url, keys["reader"], last_event_id=cursor)
        resumed = [e["data"]["resource_id"] for e in stream.events(2)]
        stream.close()
        assert resumed == ["y", "z"]
    finally:
        server.stop()


def test_the_check_catches_a_row_that_commits_out_of_order(postgres_database):
    """Why commit order matters: a lower position committing late is skipped by a follower.

    The projector never does this (it commits rows batch after batch, each batch tracked); here
    two transactions do it on purpose, and the same check the tests above use reports the gap.
    """
    services = bootstrap(postgres_database, pool_size=2)
    schema = postgres_database.rsplit("schema=", 1)[1]
    insert = f'INSERT INTO "{schema}".event_log VALUES (%s, %s, %s, %s, %s)'

    def row(position: int) -> tuple:
        return (
            position,
            "acme",
            "lease.acquired",
            f"s{position}",
            json.dumps({"id": f"e{position}", "data": {"holder": "agent_0"}}),
        )

    try:
        with psycopg.connect(services.database.conninfo()) as late:
            late.execute(insert, row(1001))  # takes position 1001, not yet committed
            with psycopg.connect(services.database.conninfo(), autocommit=True) as early:
                early.execute(insert, row(1002))
            collected = [p.event["id"] for p in services.event_log.read("acme", 1000, (), 10)]
            late.commit()
        collected += [p.event["id"] for p in services.event_log.read("acme", 1002, (), 10)]
        with pytest.raises(AssertionError, match="never delivered"):
            assert_exactly(collected, ["e1001", "e1002"])
    finally:
        services.close()


def test_a_read_sees_a_commit_acknowledged_by_another_process_while_streams_are_open(database):
    """Read-your-writes across processes: an acquire answered 201 by one server is in the very
    next GET /v1/events on another, even while that one serves streams from memory."""
    keys = make_keys(database)
    writer, reader = Server(database), Server(database)
    stream = EventStreamReader(reader.url, keys["reader"])
    try:
        assert stream.status == 200
        acquirer, events = Http(writer.url, keys["agent_0"]), Http(reader.url, keys["reader"])
        after = events.request("GET", "/v1/events?after=latest")[1]["data"]["next_cursor"]
        for n in range(30):
            lease = {"resource_type": "t", "resource_id": f"r{n}", "purpose": "p"}
            status, acquired = acquirer.request("POST", "/v1/leases", {**lease, "ttl_seconds": 60})
            assert status == 201
            read = events.request("GET", f"/v1/events?after={after}")[1]["data"]
            ids = [e["data"]["lease_id"] for e in read["events"]]
            assert ids == [acquired["data"]["lease_id"]], f"read {n} after the 201: {ids}"
            after = read["next_cursor"]
    finally:
        stream.conn.close()
        writer.stop()
        reader.stop()
