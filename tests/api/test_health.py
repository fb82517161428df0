"""/healthz says the process answers; /readyz says whether it can work: to anyone in words, to
an operator's key with the positions."""

from __future__ import annotations

from dataclasses import asdict

from tests.support import bearer

LEASE = {"resource_type": "deploy", "resource_id": "svc", "purpose": "p", "ttl_seconds": 60}
PROJECTIONS = {
    "lease_index",
    "handoff_inbox",
    "event_log",
    "lease_directory",
    "lease_terms",
    "handoff_directory",
    "event_parties",
}


def test_healthz_needs_no_key_and_no_database(client, services):
    assert client.simulate_get("/healthz").json == {"data": {"status": "ok"}}
    services.store.datastore.close()
    result = client.simulate_get("/healthz")
    assert result.status_code == 200
    assert result.json == {"data": {"status": "ok"}}


def test_readyz_without_a_key_says_ready_and_nothing_that_counts(client, alice, ops):
    """A position polled without a key would count every organization's events."""
    client.simulate_post("/v1/leases", json=LEASE, headers=bearer(alice))
    for headers in ({}, bearer(alice)):  # an agent's key sees what anyone does
        result = client.simulate_get("/readyz", headers=headers)
        assert result.status_code == 200
        assert result.json == {"data": {"status": "ready", "problems": []}}
    assert client.simulate_get("/readyz", headers=bearer("nonsense")).status_code == 401


def test_readyz_reports_the_database_to_an_operator_and_no_position_to_anyone(
    client, services, key, alice, ops
):
    for n in range(3):
        lease = {**LEASE, "resource_id": f"svc-{n}"}
        assert client.simulate_post("/v1/leases", json=lease, headers=bearer(alice)).status_code
    result = client.simulate_get("/readyz", headers=bearer(ops))
    assert result.status_code == 200
    data = result.json["data"]
    assert data == {"status": "ready", "database": "ok", "failures": {}, "problems": []}
    # Positions count every organization's commits: the metrics port's alone.
    report = services.readiness.check()
    assert report.log_position >= 3 and set(report.projections) == PROJECTIONS
    # So nothing an operator is answered changes with another organization's commits.
    umbra = key("umbra", "agent_u")
    for n in range(3):
        lease = {**LEASE, "resource_id": f"u-{n}"}
        client.simulate_post("/v1/leases", json=lease, headers=bearer(umbra))
    assert client.simulate_get("/readyz", headers=bearer(ops)).json["data"] == data


def test_the_readiness_counts_the_events_a_projection_has_not_applied(client, services, alice):
    client.simulate_post("/v1/leases", json=LEASE, headers=bearer(alice))
    with services.store.writing() as writer:
        writer.set_position("handoff_inbox", 0)  # as if it had applied nothing yet
    report = services.readiness.check()
    assert asdict(report.projections["handoff_inbox"]) == {
        "position": 0,
        "lag": report.log_position,
    }
    assert report.projections["event_log"].lag == 0


def test_readyz_is_503_saying_the_database_does_not_answer(client, services):
    services.store.datastore.close()
    result = client.simulate_get("/readyz")
    assert result.status_code == 503
    assert result.json == {
        "data": {"status": "unavailable", "problems": ["the database does not answer"]}
    }
