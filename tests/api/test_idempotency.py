"""Idempotency-Key on every POST that changes state, each rule on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import threading

import pytest
from falcon.testing import TestClient

from tests.support import bearer
from titen.api.rest import idempotency
from titen.api.rest.app import create_app
from titen.api.rest.settings import ServerSettings
from titen.service.bootstrap import bootstrap

ACQUIRE = {"resource_type": "deploy", "resource_id": "svc", "purpose": "p", "ttl_seconds": 600}
HANDOFF = {"to_principal": "agent_bob", "subject_id": "user_rama"}


def post(client, key, path, body, idempotency_key=None, raw=None):
    headers = {**bearer(key), "content-type": "application/json"}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return client.simulate_post(path, body=raw or json.dumps(body), headers=headers)


def events(services) -> int:
    return services.app.recorder.max_notification_id() or 0


def test_a_repeat_gets_the_first_answer_and_records_nothing(client, services, alice):
    first = post(client, alice, "/v1/leases", ACQUIRE, "k1")
    recorded = events(services)
    again = post(client, alice, "/v1/leases", ACQUIRE, "k1")
    assert first.status_code == again.status_code == 201
    assert again.json == first.json  # the same lease, not a second one that supersedes it
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert events(services) == recorded
    lease_id = first.json["data"]["lease_id"]
    check = client.simulate_get(f"/v1/leases/{lease_id}", headers=bearer(alice))
    assert check.status_code == 200  # still the current lease


def test_a_retried_handoff_creation_makes_one_handoff(client, services, alice, bob):
    first = post(client, alice, "/v1/handoffs", HANDOFF, "create-1")
    again = post(client, alice, "/v1/handoffs", HANDOFF, "create-1")
    assert again.json == first.json and again.status_code == 201
    inbox = client.simulate_get("/v1/handoffs", headers=bearer(bob)).json["data"]["handoffs"]
    assert [h["handoff_id"] for h in inbox] == [first.json["data"]["handoff_id"]]


def test_the_body_is_compared_as_parsed_json(client, alice):
    first = post(client, alice, "/v1/leases", ACQUIRE, "k", raw=json.dumps(ACQUIRE))
    reordered = json.dumps(dict(reversed(list(ACQUIRE.items()))), indent=4)
    again = post(client, alice, "/v1/leases", None, "k", raw=reordered)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json == first.json, (again.json, first.json)


def test_the_same_key_with_another_body_is_refused(client, services, alice):
    post(client, alice, "/v1/leases", ACQUIRE, "k")
    recorded = events(services)
    other = post(client, alice, "/v1/leases", {**ACQUIRE, "ttl_seconds": 60}, "k")
    assert other.status_code == 422
    assert other.json["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert events(services) == recorded


def test_the_scope_is_the_principal_and_the_actual_path(client, services, alice, bob):
    one = post(client, alice, "/v1/handoffs", HANDOFF, "same")
    two = post(client, alice, "/v1/handoffs", {**HANDOFF, "subject_id": "other"}, "x")
    ids = [r.json["data"]["handoff_id"] for r in (one, two)]
    # One key on two handoffs' resolve routes is two keys: both resolve.
    for handoff_id in ids:
        resolved = post(
            client, bob, f"/v1/handoffs/{handoff_id}/resolve", {"status": "accepted"}, "r"
        )
        assert resolved.status_code == 200, resolved.text
        assert "idempotent-replayed" not in resolved.headers
    # Another principal's key of the same text is its own.
    theirs = post(client, bob, "/v1/leases", ACQUIRE, "same")
    assert theirs.status_code == 201 and "idempotent-replayed" not in theirs.headers


def test_a_retried_resolve_replays_instead_of_not_found(client, alice, bob):
    handoff_id = post(client, alice, "/v1/handoffs", HANDOFF).json["data"]["handoff_id"]
    path = f"/v1/handoffs/{handoff_id}/resolve"
    first = post(client, bob, path, {"status": "rejected"}, "resolve-1")
    again = post(client, bob, path, {"status": "rejected"}, "resolve-1")
    assert first.status_code == again.status_code == 200
    assert again.json == first.json
    unkeyed = post(client, bob, path, {"status": "rejected"})
    assert unkeyed.status_code == 404  # without a key, resolution is still single-shot


def test_failures_are_not_stored_so_a_retry_runs_again(client, alice, bob):
    held = post(client, bob, "/v1/leases", ACQUIRE).json["data"]["lease_id"]
    refused = post(client, alice, "/v1/leases", ACQUIRE, "k")
    assert refused.status_code == 409
    client.simulate_delete(f"/v1/leases/{held}", headers=bearer(bob))
    retried = post(client, alice, "/v1/leases", ACQUIRE, "k")
    assert retried.status_code == 201 and "idempotent-replayed" not in retried.headers
    invalid = post(client, alice, "/v1/handoffs", {**HANDOFF, "to_principal": "nobody"}, "h")
    assert invalid.status_code == 400
    assert post(client, alice, "/v1/handoffs", HANDOFF, "h").status_code == 201


def test_without_a_key_a_repeat_runs_again(client, services, alice):
    first = post(client, alice, "/v1/leases", ACQUIRE)
    again = post(client, alice, "/v1/leases", ACQUIRE)
    assert first.json["data"]["lease_id"] != again.json["data"]["lease_id"]


@pytest.mark.parametrize(
    "bad",
    ["", "has space", "x" * 256, "caf\u00e9", "tab\there"],
)
def test_a_malformed_key_is_a_validation_error_naming_the_header(client, services, alice, bad):
    recorded = events(services)
    headers = {**bearer(alice), "content-type": "application/json"}
    answer = client.simulate_post(
        "/v1/leases",
        body=json.dumps(ACQUIRE),
        headers={**headers, "Idempotency-Key": bad.encode("latin-1", "replace").decode("latin-1")},
    )
    assert answer.status_code == 400
    assert answer.json["error"]["code"] == "VALIDATION_ERROR"
    assert "Idempotency-Key" in answer.json["error"]["message"]
    assert events(services) == recorded


def test_the_longest_and_oddest_keys_are_fine(client, alice):
    for key in ("x" * 255, "!~\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}"):
        assert (
            post(client, alice, "/v1/leases", {**ACQUIRE, "resource_id": key[:50]}, key).status_code
            == 201
        )


def test_answers_expire_after_24_hours_and_are_purged_on_write(client, services, clock, alice):
    first = post(client, alice, "/v1/leases", ACQUIRE, "old")
    assert services.answers.count() == 1
    clock.advance(24 * 3600 - 1)
    assert post(client, alice, "/v1/leases", ACQUIRE, "old").json == first.json
    clock.advance(1)
    later = post(client, alice, "/v1/leases", ACQUIRE, "old")  # expired: it runs again
    assert later.status_code == 201 and "idempotent-replayed" not in later.headers
    assert later.json["data"]["lease_id"] != first.json["data"]["lease_id"]
    assert services.answers.count() == 1  # the expired one went when the new one was written


def test_answers_survive_a_restart(database, services, clock, client, alice):
    first = post(client, alice, "/v1/leases", ACQUIRE, "durable")
    reopened = bootstrap(database, clock)
    try:
        again = post(TestClient(create_app(reopened)), alice, "/v1/leases", ACQUIRE, "durable")
    finally:
        reopened.close()
    assert again.json == first.json and again.headers["idempotent-replayed"] == "true"


def test_a_repeat_while_the_first_runs_waits_or_is_told_in_use(
    client, services, alice, monkeypatch
):
    """In one process identical requests queue on their key: the repeat waits for the first
    (here at most 0.3 s, then 409 IDEMPOTENCY_KEY_IN_USE); another body is refused at once."""
    monkeypatch.setattr(idempotency, "WAIT_SECONDS", 0.3)
    running, finish = threading.Event(), threading.Event()
    acquire = services.leases.acquire

    def slow_acquire(*args, **kwargs):
        running.set()
        finish.wait(10)
        return acquire(*args, **kwargs)

    monkeypatch.setattr(services.leases, "acquire", slow_acquire)
    answers = {}
    first = threading.Thread(
        target=lambda: answers.setdefault(
            "first", post(client, alice, "/v1/leases", ACQUIRE, "slow")
        )
    )
    first.start()
    assert running.wait(10)
    in_use = post(client, alice, "/v1/leases", ACQUIRE, "slow")
    assert in_use.status_code == 409
    assert in_use.json["error"]["code"] == "IDEMPOTENCY_KEY_IN_USE"
    other = post(client, alice, "/v1/leases", {**ACQUIRE, "ttl_seconds": 60}, "slow")
    assert other.status_code == 422
    assert other.json["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    waiting = threading.Thread(
        target=lambda: answers.setdefault(
            "waiting", post(client, alice, "/v1/leases", ACQUIRE, "slow")
        )
    )
    monkeypatch.setattr(idempotency, "WAIT_SECONDS", 10)
    waiting.start()
    finish.set()
    first.join()
    waiting.join()
    assert answers["first"].status_code == answers["waiting"].status_code == 201
    assert answers["waiting"].json == answers["first"].json
    assert answers["waiting"].headers["idempotent-replayed"] == "true"


@pytest.fixture
def loopback(services):
    """Webhooks may target this machine (the receivers in tests are local)."""
    return TestClient(create_app(services, ServerSettings(allow_private_webhooks=True)))


def test_webhook_posts_take_keys_too(loopback, services, alice):
    subscribe = {"url": "http://127.0.0.1:9/hook"}
    first = post(loopback, alice, "/v1/webhooks", subscribe, "hook-1")
    again = post(loopback, alice, "/v1/webhooks", subscribe, "hook-1")
    assert first.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    # The secret is answered once and not stored: the replay is the subscription without it.
    answered = first.json["data"]
    assert answered.pop("secret").startswith("whsec_")
    assert again.json == {"data": answered}
    listed = loopback.simulate_get("/v1/webhooks", headers=bearer(alice)).json["data"]
    assert [w["webhook_id"] for w in listed["webhooks"]] == [first.json["data"]["webhook_id"]]
    path = f"/v1/webhooks/{first.json['data']['webhook_id']}"
    rotated = post(loopback, alice, f"{path}/rotate-secret", None, "rotate-1", raw=b"")
    replayed = post(loopback, alice, f"{path}/rotate-secret", None, "rotate-1", raw=b"")
    assert rotated.status_code == replayed.status_code == 200
    assert "secret" not in replayed.json["data"]  # not a third one, and not the one kept
    rotated_data = rotated.json["data"]
    assert rotated_data.pop("secret").startswith("whsec_")
    assert replayed.json["data"] == rotated_data
    stored = [row["body"] for row in services.store.query("SELECT body FROM {idempotent_answers}")]
    assert stored and not any("whsec_" in body for body in stored)
    enabled = post(loopback, alice, f"{path}/enable", None, "enable-1", raw=b"")
    assert post(loopback, alice, f"{path}/enable", None, "enable-1", raw=b"").json == enabled.json
