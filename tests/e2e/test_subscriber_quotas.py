"""Subscriber quotas on a real server: one organization, or one principal, cannot take every
stream slot, waiting long-polls count like streams, and a slot comes back within about a
second of its client closing the connection."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.support import (
    EventStreamReader,
    Http,
    LongPoll,
    Server,
    eventually,
    subscriptions_held,
)
from titen.service.bootstrap import bootstrap

ACQUIRE = {"resource_type": "deploy", "resource_id": "r", "purpose": "p", "ttl_seconds": 60}
QUOTAS = ("--max-subscribers", "6", "--max-subscribers-per-org", "3")
QUOTAS += ("--max-subscribers-per-principal", "2", "--heartbeat-seconds", "30")


def keys(database: str, *owners: tuple[str, str]) -> list[str]:
    services = bootstrap(database, pool_size=2)
    try:
        return [services.keys.create(org, principal, "agent") for org, principal in owners]
    finally:
        services.close()


# Six slots, three per organization, two per principal; heartbeats too rare to help.
pytestmark = pytest.mark.server(*QUOTAS, threads=4, metrics=True)


def over_quota(stream: EventStreamReader, who: str) -> None:
    assert stream.status == 429
    assert stream.response.getheader("retry-after") == "2"
    error = json.loads(stream.response.read())["error"]
    assert error["code"] == "TOO_MANY_SUBSCRIBERS"
    assert f"This {who} already holds" in error["message"]
    stream.close()


def test_an_organization_at_its_quota_leaves_streams_and_long_polls_to_another(server):
    a1, a2, a3, umbra = keys(
        server.database, ("acme", "a1"), ("acme", "a2"), ("acme", "a3"), ("umbra", "u1")
    )
    held = [EventStreamReader(server.url, k) for k in (a1, a1, a2)]
    assert [s.status for s in held] == [200, 200, 200]
    over_quota(EventStreamReader(server.url, a3), "organization")
    status, body = Http(server.url, a3).request("GET", "/v1/events?after=latest&wait=5")
    assert (status, body["error"]["code"]) == (429, "TOO_MANY_SUBSCRIBERS")
    assert Http(server.url, a3).request("GET", "/v1/events")[0] == 200  # nothing to wait for

    other = EventStreamReader(server.url, umbra, query="?after=latest")
    assert other.status == 200
    status, body = Http(server.url, umbra).request("GET", "/v1/events?after=latest&wait=0.5")
    assert (status, body["data"]["events"]) == (200, [])  # it waited, in a slot of its own
    Http(server.url, umbra).request("POST", "/v1/leases", ACQUIRE)
    assert other.events(1)[0]["data"]["resource_id"] == "r"
    for stream in (*held, other):
        stream.close()


def test_a_principal_at_its_quota_leaves_slots_to_its_organization(server):
    a1, a2 = keys(server.database, ("acme", "a1"), ("acme", "a2"))
    held = [EventStreamReader(server.url, a1) for _ in range(2)]
    over_quota(EventStreamReader(server.url, a1), "principal")
    colleague = EventStreamReader(server.url, a2)
    assert colleague.status == 200
    for stream in (*held, colleague):
        stream.close()


def test_waiting_long_polls_hold_slots_as_streams_do(server):
    (a1,) = keys(server.database, ("acme", "a1"))
    polls = [LongPoll(server.url, "/v1/events?after=latest&wait=20", a1) for _ in range(2)]
    for poll in polls:
        poll.start()
    eventually(lambda: subscriptions_held(server) == 2, "both subscriptions waiting")
    assert refused_now(server, a1)
    Http(server.url, a1).request("POST", "/v1/leases", ACQUIRE)  # answers both polls
    for poll in polls:
        poll.join(timeout=15)
        assert poll.answer[0] == 200
    stream = EventStreamReader(server.url, a1)
    assert stream.status == 200  # their slots came back when they answered
    stream.close()


def refused_now(server: Server, key: str) -> bool:
    """Whether a stream opened now is refused over a quota (one let in is closed again)."""
    stream = EventStreamReader(server.url, key)
    stream.close()
    return stream.status == 429


def raw_subscription(server: Server, key: str, path: str) -> socket.socket:
    """A subscription on a plain socket, its answer's head read (a stream's) or not yet
    answered (a long-poll's), to be closed by the test as a client that goes away."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
    return sock


def admitted(server: Server, key: str) -> bool:
    """Whether a stream of `key` is admitted now (it is closed again at once)."""
    stream = EventStreamReader(server.url, key)
    stream.close()
    return stream.status == 200


@pytest.mark.parametrize("path", ["/v1/events/stream", "/v1/events?after=latest&wait=30"])
def test_a_slot_comes_back_within_a_second_of_its_client_closing(server, path):
    (a1,) = keys(server.database, ("acme", "a1"))
    first = raw_subscription(server, a1, path)
    second = raw_subscription(server, a1, path)
    eventually(lambda: subscriptions_held(server) == 2, "both subscriptions waiting")
    assert refused_now(server, a1)
    first.close()
    closed = time.monotonic()
    eventually(lambda: admitted(server, a1), "the slot freed within ~1 s", 2.5, every=0.05)
    freed_after = time.monotonic() - closed
    second.close()
    assert freed_after < 2.5  # about 1 s at most; heartbeats (30 s) play no part
