"""GET /v1/events/stream against real servers: resume, heartbeat, limits, fairness."""

from __future__ import annotations

import threading
import time

import pytest

from tests.support import (
    EventStreamReader,
    Http,
    Server,
    eventually,
    free_port,
    subscriptions_held,
)
from titen.service.bootstrap import bootstrap

ACQUIRE = {"resource_type": "deploy", "resource_id": "r", "purpose": "p", "ttl_seconds": 60}


def keys(database: str, *principals: str, org: str = "acme") -> list[str]:
    """Dispatchers' keys: these tests follow the whole log (an agent's reads only what it is
    party to: tests/e2e/test_event_scope.py)."""
    services = bootstrap(database, pool_size=2)
    try:
        return [services.keys.create(org, p, "dispatcher") for p in principals]
    finally:
        services.close()


def acquire(http: Http, resource_id: str) -> dict:
    status, body = http.request("POST", "/v1/leases", {**ACQUIRE, "resource_id": resource_id})
    assert status == 201, body
    return body["data"]


pytestmark = pytest.mark.server(
    *("--heartbeat-seconds", "0.3", "--max-subscribers", "60"),
    *("--max-subscribers-per-org", "60", "--max-subscribers-per-principal", "60"),
)


def test_a_stream_delivers_events_and_resumes_after_the_last_event_id(server):
    alice, bob = keys(server.database, "agent_alice", "agent_bob")
    http = Http(server.url, alice)
    for n in range(3):
        acquire(http, f"r{n}")
    stream = EventStreamReader(server.url, bob)
    assert stream.status == 200
    assert stream.response.getheader("content-type").startswith("text/event-stream")
    first = stream.events(2)
    stream.close()
    assert [e["data"]["resource_id"] for e in first] == ["r0", "r1"]

    resumed = EventStreamReader(server.url, bob, last_event_id=first[-1]["cursor"])
    acquire(http, "r3")
    rest = resumed.events(2)
    resumed.close()
    assert [e["data"]["resource_id"] for e in rest] == ["r2", "r3"]

    by_query = EventStreamReader(server.url, bob, query=f"?after={first[0]['cursor']}")
    assert by_query.events(1)[0]["data"]["resource_id"] == "r1"
    by_query.close()


def test_last_event_id_wins_over_after_as_an_eventsource_reconnect_sends_both(server):
    """EventSource reconnects to the URL it was opened with and adds Last-Event-ID: the header
    says where the reader stands, whatever `after` the URL carries."""
    alice, bob = keys(server.database, "agent_alice", "agent_bob")
    http = Http(server.url, alice)
    acquire(http, "before")
    tail = EventStreamReader(server.url, bob, query="?after=latest")
    acquire(http, "seen")
    (seen,) = tail.events(1)
    tail.close()
    for n in range(2):  # committed while the reader is away
        acquire(http, f"missed{n}")
    back = EventStreamReader(server.url, bob, query="?after=latest", last_event_id=seen["cursor"])
    acquire(http, "live")
    names = []
    while not names or names[-1] != "live":
        names.append(back.events(1)[0]["data"]["resource_id"])
    back.close()
    assert names == ["missed0", "missed1", "live"]  # no gap

    from_start = EventStreamReader(server.url, bob, query="?after=" + seen["cursor"])
    (first,) = from_start.events(1)
    from_start.close()
    again = EventStreamReader(
        server.url, bob, query="?after=" + seen["cursor"], last_event_id=first["cursor"]
    )
    assert again.events(1)[0]["data"]["resource_id"] == "missed1"  # no duplicate
    again.close()


def test_after_latest_starts_at_the_live_tail_and_types_filter(server):
    alice, bob = keys(server.database, "agent_alice", "agent_bob")
    http = Http(server.url, alice)
    acquire(http, "old")
    tail = EventStreamReader(server.url, bob, query="?after=latest")
    only_handoffs = EventStreamReader(server.url, bob, query="?types=handoff.created")
    acquire(http, "new")
    status, _ = http.request(
        "POST", "/v1/handoffs", {"to_principal": "agent_bob", "subject_id": "s"}
    )
    assert status == 201
    assert tail.events(1)[0]["data"]["resource_id"] == "new"
    assert only_handoffs.events(1)[0]["type"] == "handoff.created"
    tail.close()
    only_handoffs.close()


def test_a_quiet_stream_sends_comment_heartbeats(server):
    (bob,) = keys(server.database, "agent_bob")
    stream = EventStreamReader(server.url, bob)
    frames = stream.frames()
    assert next(frames) == {"comment": "connected"}
    began = time.monotonic()
    assert next(frames) == {"comment": "heartbeat"}
    assert 0.2 < time.monotonic() - began < 3
    stream.close()


def test_bad_stream_parameters_are_400(server):
    (bob,) = keys(server.database, "agent_bob")
    for query, header in (("?after=x", ""), ("", "nonsense"), ("?types=nope", "")):
        stream = EventStreamReader(server.url, bob, query=query, last_event_id=header)
        assert stream.status == 400
        stream.close()


def test_fifty_open_streams_do_not_starve_the_api(server):
    alice, bob = keys(server.database, "agent_alice", "agent_bob")
    streams = [EventStreamReader(server.url, bob, query="?after=latest") for _ in range(50)]
    assert {s.status for s in streams} == {200}
    http = Http(server.url, alice)
    began = time.monotonic()
    for n in range(20):
        acquire(http, f"busy{n}")
        status, _ = http.request(
            "POST", "/v1/handoffs", {"to_principal": "agent_bob", "subject_id": f"s{n}"}
        )
        assert status == 201
    assert time.monotonic() - began < 20  # ~40 ms a pair here; a starved pool never answers
    received = [s.events(1)[0]["data"]["resource_id"] for s in streams]
    assert received == ["busy0"] * 50
    for stream in streams:
        stream.close()


def test_past_the_subscriber_limit_a_stream_gets_503_and_the_api_still_answers(database):
    """The server's limit, with each organization within its quota: 503, not 429."""
    server = Server(
        database, 4, "--max-subscribers", "2", "--max-subscribers-per-org", "1"
    )  # heartbeats every 15 s: a closed stream's slot comes back without one
    try:
        (alice,) = keys(database, "agent_alice")
        (umbra,) = keys(database, "agent_u", org="umbra")
        (third,) = keys(database, "agent_t", org="third")
        open_streams = [EventStreamReader(server.url, k) for k in (alice, umbra)]
        refused = EventStreamReader(server.url, third)
        assert refused.status == 503
        assert refused.response.getheader("retry-after") == "2"
        body = refused.response.read()
        assert b'"UNAVAILABLE"' in body and b"limit 2" in body
        status, _ = Http(server.url, third).request("GET", "/v1/events?wait=1")
        assert status == 503
        acquire(Http(server.url, third), "still-served")
        open_streams[0].close()
        # The server sees the close within a second.
        eventually(lambda: admitted(server, third), "the closed stream's slot freed", 3, 0.1)
        open_streams[1].close()
    finally:
        server.stop()


def admitted(server: Server, key: str) -> bool:
    """Whether a stream of `key` is admitted now (it is closed again at once)."""
    stream = EventStreamReader(server.url, key)
    stream.close()
    return stream.status == 200


def test_a_stuck_subscriber_blocks_no_writer_and_no_other_subscriber(server):
    alice, bob = keys(server.database, "agent_alice", "agent_bob")
    stuck = EventStreamReader(server.url, bob)  # never reads
    live = EventStreamReader(server.url, bob)
    http = Http(server.url, alice)
    big = "x" * 3000
    for n in range(150):  # ~500 KB of frames waiting for the stuck reader
        status, _ = http.request(
            "POST",
            "/v1/handoffs",
            {"to_principal": "agent_bob", "subject_id": f"s{n}", "message": big},
        )
        assert status == 201
    assert len(live.events(150)) == 150
    stuck.close()
    live.close()


def test_streams_on_one_server_see_writes_made_through_another(postgres_database):
    first, second = Server(postgres_database), Server(postgres_database)
    try:
        alice, bob = keys(postgres_database, "agent_alice", "agent_bob")
        stream = EventStreamReader(second.url, bob, query="?after=latest")
        acquire(Http(first.url, alice), "elsewhere")
        assert stream.events(1)[0]["data"]["resource_id"] == "elsewhere"  # latency: bench/
        stream.close()
    finally:
        first.stop()
        second.stop()


def test_heartbeat_keeps_going_while_events_flow_elsewhere(server):
    alice, bob = keys(server.database, "agent_alice", "agent_bob")
    stream = EventStreamReader(server.url, bob, query="?types=handoff.created")
    http = Http(server.url, alice)
    stop = threading.Event()

    def noise() -> None:
        n = 0
        while not stop.is_set():
            acquire(http, f"noise{n}")
            n += 1
            time.sleep(0.05)

    writer = threading.Thread(target=noise)
    writer.start()
    try:
        frames = stream.frames()
        comments = [next(frames) for _ in range(3)]
        assert comments[0] == {"comment": "connected"}
        assert comments[1:] == [{"comment": "heartbeat"}] * 2
    finally:
        stop.set()
        writer.join()
        stream.close()


def test_a_stream_resumes_from_a_cursor_the_previous_release_handed_out(previous_release):
    """Cursors are sealed since that release; its unsealed ones still resume a stream, by
    Last-Event-ID and by `after`, and the frames that follow carry sealed ones."""
    url, manifest = previous_release
    answer = manifest["answers"]["acme"]["/v1/events?limit=500"]
    then = answer["body"]["data"]["events"]
    key = next(
        k["key"]
        for k in manifest["keys"]
        if (k["organization"], k["principal"]) == ("acme", answer["as"])
    )
    server = Server(url, 4)
    try:
        middle = len(then) // 2
        expected = [e["id"] for e in then[middle + 1 : middle + 4]]
        by_header = EventStreamReader(server.url, key, last_event_id=then[middle]["cursor"])
        resumed = by_header.events(3)
        by_header.close()
        assert [e["id"] for e in resumed] == expected
        assert resumed[0]["cursor"] != then[middle + 1]["cursor"]  # served sealed now
        by_query = EventStreamReader(server.url, key, query=f"?after={then[middle]['cursor']}")
        assert [e["id"] for e in by_query.events(3)] == expected
        by_query.close()
        again = EventStreamReader(server.url, key, last_event_id=resumed[0]["cursor"])
        assert [e["id"] for e in again.events(2)] == expected[1:]
        again.close()
    finally:
        server.stop()


def test_a_stopping_server_ends_its_streams_and_answers_its_long_polls(database):
    """SIGTERM ends an open stream (the body ends, and a client's EventSource reconnects
    elsewhere) and answers a waiting long-poll at once with no events and its cursor; before,
    both were cut after waitress's 5 s, the long-poll with no answer at all."""
    server = Server(database, 4, "--heartbeat-seconds", "60", "--metrics-port", str(free_port()))
    try:
        (bob,) = keys(server.database, "agent_bob")
        stream = EventStreamReader(server.url, bob)
        frames = stream.frames()
        assert next(frames) == {"comment": "connected"}
        answers: list[tuple[int, dict | None]] = []
        poll = Http(server.url, bob)
        waiting = threading.Thread(
            target=lambda: answers.append(poll.request("GET", "/v1/events?after=latest&wait=20"))
        )
        waiting.start()
        eventually(lambda: subscriptions_held(server) == 2, "the long-poll waiting")
        server.process.terminate()
        assert list(frames) == []  # the body ended without another frame
        waiting.join(timeout=30)
        assert server.process.wait(timeout=30) == 0
        ((status, body),) = answers
        assert status == 200, body
        assert body is not None and body["data"]["events"] == []
        assert body["data"]["next_cursor"]
    finally:
        server.stop()
