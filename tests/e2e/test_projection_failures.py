"""A read model broken on purpose under a real server: /readyz and the metrics say so, the log
names the event, `titen projections verify` finds it and `titen projections rebuild` repairs it."""

from __future__ import annotations

import json

from tests.support import (
    Http,
    Server,
    besides_database,
    create_key,
    free_port,
    sample,
    scrape,
    titen,
)
from titen.service.bootstrap import bootstrap


def test_readyz_turns_503_on_a_broken_read_model_and_200_after_a_rebuild(database):
    sender = create_key(database, "acme", "agent_sender")
    reviewer = create_key(database, "acme", "agent_reviewer")
    ops = create_key(database, "acme", "ops", "operator")
    port = free_port()
    server = Server(database, 2, "--metrics-port", str(port))
    try:
        api = Http(server.url)
        body = {"to_principal": "agent_reviewer", "subject_id": "s"}
        handoff_id = api.request("POST", "/v1/handoffs", body, key=sender)[1]["data"]["handoff_id"]
        assert api.request("GET", "/readyz")[0] == 200
        assert sample(scrape(port), "titen_projection_failed", projection="event_log") == 0
        broken = bootstrap(database)
        try:
            with broken.store.writing() as writer:  # the creation its resolution copies from
                writer.execute("DELETE FROM {event_log} WHERE subject = %s", [handoff_id])
        finally:
            broken.close()
        resolve = f"/v1/handoffs/{handoff_id}/resolve"
        assert api.request("POST", resolve, {"status": "accepted"}, key=reviewer)[0] == 500

        status, ready = api.request("GET", "/readyz", key=ops)
        assert status == 503
        assert ready["data"]["failures"]["event_log"]["event_type"] == "handoff.accepted"
        metrics = scrape(port)
        assert sample(metrics, "titen_projection_failed", projection="event_log") == 1
        assert sample(metrics, "titen_projection_failed", projection="handoff_inbox") == 0
        assert sample(metrics, "titen_projection_failures_total", projection="event_log") == 1

        verified = titen("projections", "verify", "event_log", database=database, check=False)
        assert verified.returncode == 1 and "event_log" in verified.stderr
        assert api.request("GET", "/readyz")[0] == 503
        rebuilt = titen("projections", "rebuild", "event_log", database=database)
        assert rebuilt.stdout.startswith("rebuilt event_log")
        assert besides_database(rebuilt.stderr) == ""  # not a terminal: no progress drawn

        assert api.request("GET", "/readyz")[0] == 200
        assert sample(scrape(port), "titen_projection_failed", projection="event_log") == 0
        assert api.request("POST", resolve, {"status": "accepted"}, key=reviewer)[0] == 200
    finally:
        server.stop()
    lines = [json.loads(line) for line in server.log.splitlines() if line.startswith("{")]
    [failure] = [line for line in lines if line["logger"] == "titen.projections"]
    assert failure["level"] == "error"
    assert (failure["projection"], failure["event_type"]) == ("event_log", "handoff.accepted")
    assert failure["position"] == ready["data"]["failures"]["event_log"]["position"]
    assert "IndexError" in failure["traceback"]


def test_a_server_refuses_to_start_on_a_read_model_that_fails_and_says_how_to_repair(database):
    create_key(database, "acme", "agent_alice")
    lease = {"resource_type": "deploy", "resource_id": "svc", "purpose": "p", "ttl_seconds": 60}
    server = Server(database, 2)
    try:
        key = create_key(database, "acme", "agent_bob")
        assert Http(server.url).request("POST", "/v1/leases", lease, key=key)[0] == 201
    finally:
        server.stop()
    broken = bootstrap(database)
    try:  # its rows are there, but its record says it has applied none of them
        with broken.store.writing() as writer:
            writer.set_position("lease_directory", 0)
    finally:
        broken.close()

    started = titen("serve", "--port", str(free_port()), database=database, check=False)
    assert started.returncode == 2
    assert "titen: read model lease_directory failed on log position" in started.stderr
    assert "titen projections rebuild lease_directory" in started.stderr

    assert titen("projections", "rebuild", "lease_directory", database=database).returncode == 0
    Server(database, 2).stop()  # it serves again
