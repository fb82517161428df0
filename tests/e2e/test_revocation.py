"""Revoking a key ends what was opened with it, in every server process, on both backends.

Two `titen serve` processes share one database; the revocation is made by the CLI, a third
process. Heartbeats and long-poll waits are far longer than the bound checked here, so nothing
but the revocation can end the streams and the long-polls this quickly.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.support import (
    EventStreamReader,
    Http,
    LongPoll,
    Server,
    create_key,
    eventually,
    subscriptions_held,
    titen,
)

ACQUIRE = {"resource_type": "deploy", "resource_id": "r", "purpose": "p", "ttl_seconds": 60}
ENDS_WITHIN_SECONDS = 3  # the promise is 1 s; slack for a loaded two-core machine


@pytest.fixture
def servers(database: str, serve: Callable[..., Server]) -> list[Server]:
    return [serve(database, "--heartbeat-seconds", "60", threads=4, metrics=True) for _ in range(2)]


def ended_at(stream: EventStreamReader) -> float:
    """Read a stream to its end (events and comments alike); when it ended."""
    for _ in stream.frames():
        pass
    return time.monotonic()


def test_revocation_ends_streams_and_long_polls_in_every_process(servers):
    database = servers[0].database
    reader = create_key(database, "acme", "agent_reader", "dispatcher")  # reads the whole log
    writer = create_key(database, "acme", "agent_writer")
    status, body = Http(servers[0].url, writer).request("POST", "/v1/leases", ACQUIRE)
    assert status == 201
    for server in servers:  # the reader's key is in each process's cache now
        status, page = Http(server.url, reader).request("GET", "/v1/events")
        assert status == 200 and len(page["data"]["events"]) == 1
    cursor = page["data"]["next_cursor"]
    streams = [EventStreamReader(s.url, reader, f"?after={cursor}") for s in servers]
    polls = [LongPoll(s.url, f"/v1/events?after={cursor}&wait=30", reader) for s in servers]
    for poll in polls:
        poll.start()
    for stream in streams:  # each stream is open and following
        assert next(stream.frames()) == {"comment": "connected"}
    eventually(lambda: all(subscriptions_held(s) == 2 for s in servers), "the long-polls waiting")
    assert all(poll.is_alive() for poll in polls)

    titen("keys", "revoke", "--org", "acme", "--principal", "agent_reader", database=database)
    revoked_at = time.monotonic()

    for server in servers:  # new requests are refused at once, cached key or not
        status, body = Http(server.url, reader).request("GET", "/v1/events")
        assert status == 401, body
    for stream in streams:
        assert ended_at(stream) - revoked_at < ENDS_WITHIN_SECONDS
        stream.close()
    for poll in polls:
        poll.join(ENDS_WITHIN_SECONDS)
        status, body = poll.answer
        assert status == 401, body
        assert body["error"]["code"] == "UNAUTHORIZED"
        assert poll.answered_at - revoked_at < ENDS_WITHIN_SECONDS
    # The writer's streams and requests are untouched.
    other = EventStreamReader(servers[1].url, writer)
    assert other.events(1)[0]["data"]["resource_id"] == "r"
    other.close()
    assert Http(servers[1].url, writer).request("GET", "/v1/events")[0] == 200
