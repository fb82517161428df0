"""A read model that fails on an event: the command fails and stores nothing, the failure is
logged with the event's position and type and shown by /readyz until a rebuild repairs it."""

from __future__ import annotations

import logging

import pytest

from tests.support import bearer
from titen.projections.failures import ProjectionFailed
from titen.service.bootstrap import bootstrap


def handoff(client, sender) -> str:
    body = {"to_principal": "agent_reviewer", "subject_id": "s"}
    created = client.simulate_post("/v1/handoffs", json=body, headers=bearer(sender))
    assert created.status_code == 201
    return created.json["data"]["handoff_id"]


def resolve(client, reviewer, handoff_id: str):
    path = f"/v1/handoffs/{handoff_id}/resolve"
    return client.simulate_post(path, json={"status": "accepted"}, headers=bearer(reviewer))


def forget_published(services, handoff_id: str) -> None:
    """Break the event log on purpose: it no longer holds the handoff's creation, which its
    resolution copies from."""
    with services.store.writing() as writer:
        writer.execute("DELETE FROM {event_log} WHERE subject = %s", [handoff_id])


def test_a_failing_read_model_fails_the_command_shows_in_readyz_until_rebuilt(
    client, services, sender, reviewer, ops, caplog
):
    handoff_id = handoff(client, sender)
    forget_published(services, handoff_id)
    before = services.app.recorder.max_notification_id()
    caplog.set_level(logging.ERROR)

    assert resolve(client, reviewer, handoff_id).status_code == 500
    assert services.app.recorder.max_notification_id() == before  # nothing was stored

    [logged] = [r for r in caplog.records if r.name == "titen.projections"]
    assert logged.fields["projection"] == "event_log"
    assert logged.fields["event_type"] == "handoff.accepted"
    assert logged.fields["position"] > before
    assert logged.exc_info[0] is IndexError
    ready = client.simulate_get("/readyz", headers=bearer(ops))
    assert ready.status_code == 503
    data = ready.json["data"]
    assert data["status"] == "unavailable" and data["database"] == "ok"
    failure = data["failures"]["event_log"]
    assert failure["position"] == logged.fields["position"]
    assert failure["event_type"] == "handoff.accepted"
    assert failure["error"].startswith("IndexError")
    [problem] = data["problems"]
    assert problem.startswith(f"event_log: failed on log position {failure['position']}")
    assert "titen projections rebuild event_log" in problem
    public = client.simulate_get("/readyz").json["data"]  # words only, no position or text
    assert public == {
        "status": "unavailable",
        "problems": [
            "read model event_log failed on an event; repair it with"
            " `titen projections rebuild event_log`"
        ],
    }
    assert "projections" not in data  # positions are the metrics port's alone

    assert services.projector.verify("event_log") is not None  # the rows differ: not cleared
    assert client.simulate_get("/readyz", headers=bearer(ops)).status_code == 503
    services.projector.rebuild("event_log")
    ready = client.simulate_get("/readyz", headers=bearer(ops))
    assert ready.status_code == 200
    assert ready.json["data"]["failures"] == {} and ready.json["data"]["problems"] == []
    assert resolve(client, reviewer, handoff_id).status_code == 200


def test_a_verification_that_finds_the_rows_equal_to_the_log_clears_a_failure(
    client, services, sender, reviewer, ops, monkeypatch
):
    inbox = services.projector.projections["handoff_inbox"]

    def broken(writer, event, position):
        raise RuntimeError("the disk hiccupped")

    monkeypatch.setattr(inbox, "apply", broken)
    before = services.app.recorder.max_notification_id()
    body = {"to_principal": "agent_reviewer", "subject_id": "s"}
    created = client.simulate_post("/v1/handoffs", json=body, headers=bearer(sender))
    assert created.status_code == 500
    # An error raised by Python code, not the database, rolls back too (PostgreSQL's recorder).
    assert services.app.recorder.max_notification_id() == before
    monkeypatch.undo()
    ready = client.simulate_get("/readyz", headers=bearer(ops)).json["data"]
    assert ready["failures"]["handoff_inbox"]["error"] == "RuntimeError: the disk hiccupped"
    assert ready["failures"]["handoff_inbox"]["event_type"] == "handoff.created"
    assert services.projector.verify("handoff_inbox") is None
    assert client.simulate_get("/readyz", headers=bearer(ops)).status_code == 200
    handoff(client, sender)


def test_a_read_model_failing_on_an_old_event_stops_the_start_and_is_recorded(
    database, client, services, sender, reviewer
):
    handoff_id = handoff(client, sender)
    assert resolve(client, reviewer, handoff_id).status_code == 200
    created = services.store.query(
        "SELECT position FROM {event_log} WHERE subject = %s ORDER BY position", [handoff_id]
    )[0]["position"]
    with services.store.writing() as writer:  # its rows are there, its record says they are not
        writer.set_position("event_log", created - 1)
    with pytest.raises(ProjectionFailed, match="rebuild event_log"):
        bootstrap(database)
    [failure] = services.projector.failures.current()
    assert (failure.projection, failure.event_type) == ("event_log", "handoff.created")
    repairing = bootstrap(database, catch_up=False)  # what `titen projections rebuild` opens
    try:
        repairing.projector.rebuild("event_log")
    finally:
        repairing.close()
    assert services.projector.failures.current() == []
    bootstrap(database).close()
