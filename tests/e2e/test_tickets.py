"""Event tickets across real server processes sharing one database, on both backends: issued by
one server, accepted by another, ended by `titen keys revoke` (streams and waiting long-polls
opened with a ticket end too), and never written to a server's log."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest

from tests.support import (
    TITEN,
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


def test_a_ticket_from_one_server_opens_streams_on_every_server_until_its_key_is_revoked(
    servers,
):
    database = servers[0].database
    reader = create_key(database, "acme", "agent_reader", "dispatcher")  # reads the whole log
    writer = create_key(database, "acme", "agent_writer")
    status, body = Http(servers[0].url, reader).request("POST", "/v1/events/tickets")
    assert status == 201, body
    ticket = body["data"]["ticket"]
    streams = [EventStreamReader(s.url, None, f"?ticket={ticket}") for s in servers]
    assert [s.status for s in streams] == [200, 200]
    assert Http(servers[1].url, writer).request("POST", "/v1/leases", ACQUIRE)[0] == 201
    for stream in streams:
        assert stream.events(1)[0]["data"]["resource_id"] == "r"
    polls = [LongPoll(s.url, f"/v1/events?after=latest&wait=30&ticket={ticket}") for s in servers]
    for poll in polls:
        poll.start()
    eventually(lambda: all(subscriptions_held(s) == 2 for s in servers), "the long-polls waiting")
    assert all(poll.is_alive() for poll in polls)

    titen("keys", "revoke", "--org", "acme", "--principal", "agent_reader", database=database)
    revoked_at = time.monotonic()

    for stream in streams:
        for _ in stream.frames():
            pass  # read to its end
        assert time.monotonic() - revoked_at < ENDS_WITHIN_SECONDS
        stream.close()
    for poll in polls:
        poll.join(ENDS_WITHIN_SECONDS)
        assert poll.answer[0] == 401, poll.answer
        assert poll.answered_at - revoked_at < ENDS_WITHIN_SECONDS
    for server in servers:
        refused = EventStreamReader(server.url, None, f"?ticket={ticket}")
        assert refused.status == 401
        refused.close()
        status, _ = Http(server.url).request("GET", f"/v1/events?ticket={ticket}")
        assert status == 401
    for server in servers:
        server.stop()
        secret = ticket.removeprefix("titen_ticket_")
        assert secret not in server.log and "ticket=" not in server.log
        assert "/v1/events/stream" in server.log  # the requests were logged, without it


def test_a_cors_origin_that_is_not_one_is_refused_at_start(tmp_path):
    run = subprocess.run(
        [
            TITEN,
            "serve",
            "--cors-origin",
            "https://app.example.com/",
            "--database",
            f"sqlite:///{tmp_path}/t.db",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 2
    assert "is not an origin" in run.stderr and "Traceback" not in run.stderr
