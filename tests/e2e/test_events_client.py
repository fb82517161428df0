"""The Python client's event-log reads and `titen events tail`, against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

from tests.support import TITEN, Server
from titen.client import TitenClient, ValidationError
from titen.service.bootstrap import bootstrap


@pytest.fixture
def server(tmp_path):
    server = Server(f"sqlite:///{tmp_path}/titen.db")
    yield server
    server.stop()


@pytest.fixture
def keys(server):
    services = bootstrap(server.database, pool_size=2)
    try:
        yield {  # bob follows the whole log: a dispatcher
            "alice": services.keys.create("acme", "alice", "agent"),
            "bob": services.keys.create("acme", "bob", "dispatcher"),
        }
    finally:
        services.close()


def acquire(client: TitenClient, n: int) -> str:
    return client.acquire_lease("deploy", f"r{n}", purpose="p", ttl_seconds=60).lease_id


def test_events_pages_by_cursor_and_long_polls(server, keys):
    with (
        TitenClient(server.url, keys["alice"]) as alice,
        TitenClient(server.url, keys["bob"]) as bob,
    ):
        ids = [acquire(alice, n) for n in range(3)]
        first = bob.events(limit=2)
        rest = bob.events(after=first.next_cursor)
        assert [e["data"]["lease_id"] for e in first.events + rest.events] == ids
        later = threading.Timer(0.3, acquire, args=(alice, 9))
        later.start()
        began = time.monotonic()
        waited = bob.events(after=rest.next_cursor, wait=10)
        later.join()  # the long-poll may answer first: alice must not close under its request
        assert [e["data"]["resource_id"] for e in waited.events] == ["r9"]
        assert time.monotonic() - began < 5
        assert bob.events(after="latest", types=["handoff.created"]).events == []
        with pytest.raises(ValidationError):
            bob.events(types=["lease.released"])


def test_follow_and_stream_deliver_everything_in_order(server, keys):
    with (
        TitenClient(server.url, keys["alice"]) as alice,
        TitenClient(server.url, keys["bob"]) as bob,
    ):
        ids = [acquire(alice, n) for n in range(4)]
        followed = bob.follow(wait=1)
        assert [next(followed)["data"]["lease_id"] for _ in ids] == ids
        streamed = bob.stream()
        assert [next(streamed)["data"]["lease_id"] for _ in ids] == ids
        streamed.close()


def test_a_stream_resumes_after_the_server_restarts(tmp_path):
    database = f"sqlite:///{tmp_path}/titen.db"
    server = Server(database)
    services = bootstrap(database, pool_size=2)
    alice_key = services.keys.create("acme", "alice", "agent")
    bob_key = services.keys.create("acme", "bob", "dispatcher")
    services.close()
    alice, bob = TitenClient(server.url, alice_key), TitenClient(server.url, bob_key)
    try:
        acquire(alice, 0)
        stream = bob.stream(retries=50)
        assert next(stream)["data"]["resource_id"] == "r0"
        server.kill()
        server = Server(database, port=server.port)
        acquire(alice, 1)
        assert next(stream)["data"]["resource_id"] == "r1"  # resumed, r0 not repeated
        stream.close()
    finally:
        alice.close()
        bob.close()
        server.stop()


def test_titen_events_tail_prints_one_json_object_per_line_from_where_it_is_told(server, keys):
    with TitenClient(server.url, keys["alice"]) as alice:
        for n in range(3):
            acquire(alice, n)
        after = alice.events(limit=1).next_cursor
    env = {**os.environ, "TITEN_API_KEY": keys["bob"], "TITEN_URL": server.url}
    tail = subprocess.Popen(
        [TITEN, "events", "tail", "--after", after, "--types", "lease.acquired"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = [tail.stdout.readline() for _ in range(2)]
        assert [json.loads(line)["data"]["resource_id"] for line in lines] == ["r1", "r2"]
    finally:
        tail.terminate()
        tail.wait(timeout=10)


def test_titen_events_tail_reports_a_bad_cursor(server, keys):
    env = {**os.environ, "TITEN_API_KEY": keys["bob"], "TITEN_URL": server.url}
    result = subprocess.run(
        [TITEN, "events", "tail", "--after", "nonsense"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "after is not valid" in result.stderr
