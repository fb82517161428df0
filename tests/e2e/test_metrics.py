"""`titen serve --metrics-port`: Prometheus text on a listener of its own, parsed with
prometheus-client's parser, whose counters move with the requests made."""

from __future__ import annotations

import subprocess

import pytest

from tests.receiver import Receiver
from tests.support import (
    TITEN,
    EventStreamReader,
    Http,
    Server,
    create_key,
    eventually,
    free_port,
    sample,
    scrape,
)

LEASE = {"resource_type": "deploy", "resource_id": "svc", "purpose": "p", "ttl_seconds": 60}
# Every label a titen_ series may carry: none names an organization, a principal or an id.
LABELS = {"method", "route", "status", "projection", "le", "outcome", "name"}
PROJECTIONS = (
    "lease_index",
    "handoff_inbox",
    "event_log",
    "lease_directory",
    "lease_terms",
    "handoff_directory",
    "event_parties",
)


pytestmark = pytest.mark.server("--heartbeat-seconds", "0.2", threads=4, metrics=True)


def requests_total(metrics, method, route, status) -> float:
    return sample(
        metrics, "titen_http_requests_total", method=method, route=route, status=str(status)
    )


def test_counters_move_with_the_requests_made(server):
    port = server.metrics_port
    alice = create_key(server.database, "acme", "agent_alice")
    bob = create_key(server.database, "acme", "agent_bob")
    ops = create_key(server.database, "acme", "ops", "operator")  # /readyz shows it positions
    api = Http(server.url)
    before = scrape(port)

    assert api.request("POST", "/v1/leases", LEASE, key=alice)[0] == 201
    assert api.request("POST", "/v1/leases", LEASE, key=alice)[0] == 201  # a re-acquire
    assert api.request("POST", "/v1/leases", LEASE, key=bob)[0] == 409
    lease_id = api.request("POST", "/v1/leases", {**LEASE, "resource_id": "b"}, key=bob)[1]
    lease_id = lease_id["data"]["lease_id"]
    assert api.request("GET", f"/v1/leases/{lease_id}", key=bob)[0] == 200
    assert api.request("DELETE", f"/v1/leases/{lease_id}", key=bob)[0] == 200
    handoffs = []
    for _ in range(3):
        body = {"to_principal": "agent_bob", "subject_id": "s"}
        handoffs.append(api.request("POST", "/v1/handoffs", body, key=alice)[1]["data"])
    for handoff, status in zip(handoffs, ["accepted", "accepted", "rejected"], strict=True):
        path = f"/v1/handoffs/{handoff['handoff_id']}/resolve"
        assert api.request("POST", path, {"status": status}, key=bob)[0] == 200
    assert api.request("GET", "/v1/handoffs", key="titen_wrong")[0] == 401
    assert api.request("GET", "/no/such/route")[0] == 404

    after = scrape(port)

    def moved(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert moved("titen_http_requests_total", method="POST", route="/v1/leases", status="201") == 3
    assert moved("titen_http_requests_total", method="POST", route="/v1/leases", status="409") == 1
    route = "/v1/leases/{lease_id}"
    assert moved("titen_http_requests_total", method="GET", route=route, status="200") == 1
    assert moved("titen_http_requests_total", method="DELETE", route=route, status="200") == 1
    resolve = "/v1/handoffs/{handoff_id}/resolve"
    assert moved("titen_http_requests_total", method="POST", route=resolve, status="200") == 3
    assert moved("titen_http_requests_total", method="GET", route="/v1/handoffs", status="401") == 1
    assert moved("titen_http_requests_total", method="GET", route="unmatched", status="404") == 1
    duration = "titen_http_request_duration_seconds_count"
    assert moved(duration, method="POST", route="/v1/leases") == 4
    assert moved(duration, method="POST", route=resolve) == 3
    assert moved("titen_leases_acquired_total") == 3
    assert moved("titen_lease_conflicts_total") == 1
    assert moved("titen_leases_released_total") == 1
    assert moved("titen_handoffs_created_total") == 3
    assert moved("titen_handoffs_resolved_total", status="accepted") == 2
    assert moved("titen_handoffs_resolved_total", status="rejected") == 1

    ready = api.request("GET", "/readyz", key=ops)[1]["data"]
    assert "log_position" not in ready  # positions are this port's alone
    assert sample(after, "titen_event_log_position") > 0
    assert sample(after, "titen_database_up") == 1
    for name in PROJECTIONS:
        assert ("titen_projection_lag_events", frozenset({("projection", name)})) in after


def test_no_series_names_an_organization_or_principal(server):
    port = server.metrics_port
    alice = create_key(server.database, "acme", "agent_alice")
    Http(server.url).request("POST", "/v1/leases", LEASE, key=alice)
    metrics = scrape(port)
    titen = [(name, labels) for name, labels in metrics if name.startswith("titen_")]
    assert titen
    for name, labels in titen:
        assert {label for label, _ in labels} <= LABELS, name
        assert not any(value in ("acme", "agent_alice") for _, value in labels), name


def test_open_streams_are_counted_while_they_are_open(server):
    port = server.metrics_port
    alice = create_key(server.database, "acme", "agent_alice")
    assert sample(scrape(port), "titen_stream_subscribers") == 0
    streams = [EventStreamReader(server.url, alice, "?after=latest") for _ in range(2)]
    assert sample(scrape(port), "titen_stream_subscribers") == 2
    for stream in streams:
        stream.close()
    eventually(lambda: sample(scrape(port), "titen_stream_subscribers") == 0, "streams closed")


def test_a_port_that_is_no_port_is_refused_before_serving(database):
    done = subprocess.run(
        [TITEN, "serve", "--metrics-port", "99999", "--database", database],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "not a port number" in done.stderr


def test_webhook_deliveries_are_counted_by_outcome_and_the_backlog_drains(database):

    answers = iter([503, 503])
    receiver = Receiver(answer=lambda request: next(answers, 200))
    port = free_port()
    fast = ("--allow-private-webhooks", "--webhook-retry-seconds", "0.2,0.2,0.2")
    server = Server(database, 4, "--metrics-port", str(port), *fast)
    try:
        alice = create_key(database, "acme", "agent_alice")
        api = Http(server.url, alice)
        before = scrape(port)
        body = {"url": receiver.url, "types": ["lease.acquired"]}
        assert api.request("POST", "/v1/webhooks", body)[0] == 201
        for n in range(3):
            assert api.request("POST", "/v1/leases", {**LEASE, "resource_id": f"w{n}"})[0] == 201
        receiver.wait_for(5)  # two refusals, then the three events

        def moved(outcome: str) -> float:
            after = scrape(port)
            name = "titen_webhook_deliveries_total"
            return sample(after, name, outcome=outcome) - sample(before, name, outcome=outcome)

        eventually(lambda: moved("delivered") == 3, "three deliveries counted")
        assert moved("rejected") == 2
        assert moved("timeout") == moved("unreachable") == moved("refused") == 0
        eventually(
            lambda: sample(scrape(port), "titen_webhook_backlog_events") == 0, "backlog drained"
        )
    finally:
        server.stop()
        receiver.close()


def test_the_webhook_backlog_counts_what_a_failing_subscription_holds_back(database):
    port = free_port()
    slow = ("--allow-private-webhooks", "--webhook-retry-seconds", "60")
    server = Server(database, 4, "--metrics-port", str(port), *slow)
    try:
        alice = create_key(database, "acme", "agent_alice")
        api = Http(server.url, alice)
        nobody = {"url": f"http://127.0.0.1:{free_port()}/hook", "types": ["lease.acquired"]}
        assert api.request("POST", "/v1/webhooks", nobody)[0] == 201
        for n in range(2):
            assert api.request("POST", "/v1/leases", {**LEASE, "resource_id": f"b{n}"})[0] == 201
        eventually(
            lambda: (
                sample(scrape(port), "titen_webhook_deliveries_total", outcome="unreachable") >= 1
            ),
            "a delivery to a closed port",
        )
        assert sample(scrape(port), "titen_webhook_backlog_events") == 2
    finally:
        server.stop()
