"""The lease routes, exactly as the spec says, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import re

import pytest

from tests.support import bearer

ACQUIRE = {
    "resource_type": "deploy",
    "resource_id": "checkout-service",
    "purpose": "run rollback smoke",
    "ttl_seconds": 600,
}


def acquire(client, key, **changes):
    return client.simulate_post("/v1/leases", json={**ACQUIRE, **changes}, headers=bearer(key))


def release(client, key, lease_id):
    return client.simulate_delete(f"/v1/leases/{lease_id}", headers=bearer(key))


def event_count(services) -> int:
    return services.app.recorder.max_notification_id() or 0


def test_acquire_returns_a_new_lease_id_its_expiry_and_its_fencing_token(client, alice):
    result = acquire(client, alice)
    assert result.status_code == 201
    data = result.json["data"]
    assert set(data) == {"lease_id", "expires_at", "fencing_token"}
    assert data["fencing_token"] == 1  # the resource's first acquire
    assert re.fullmatch(r"lease_[0-9a-f]{32}", data["lease_id"])
    assert data["expires_at"] == "2026-07-30T10:58:13.829Z"  # the fake clock + 600 s


def test_second_principal_gets_409_with_the_expiry_and_nothing_else(client, alice, bob):
    acquire(client, alice)
    result = acquire(client, bob, purpose="something else")
    assert result.status_code == 409
    assert result.json == {
        "error": {
            "code": "CONFLICT",
            "message": "Resource is leased by another principal until 2026-07-30T10:58:13.829Z.",
        }
    }
    leaked = ("agent_alice", "rollback", "checkout-service")
    assert not any(word in result.text for word in leaked)
    assert not any(word in value for word in leaked for value in result.headers.values())


def test_other_resources_and_other_organizations_are_independent(client, key, alice, bob):
    acquire(client, alice)
    assert acquire(client, bob, resource_id="payments").status_code == 201
    assert acquire(client, bob, resource_type="build").status_code == 201
    assert acquire(client, key("umbra", "agent_alice")).status_code == 201


def test_reacquiring_supersedes_and_the_old_id_is_gone(client, alice):
    first = acquire(client, alice).json["data"]["lease_id"]
    second = acquire(client, alice).json["data"]["lease_id"]
    assert second != first
    assert release(client, alice, first).status_code == 404
    assert release(client, alice, second).status_code == 200


def test_after_expiry_anyone_may_acquire_and_the_old_lease_ends(client, clock, alice, bob):
    old = acquire(client, alice, ttl_seconds=10).json["data"]["lease_id"]
    clock.advance(9.999)
    assert acquire(client, bob).status_code == 409
    clock.advance(0.001)
    new = acquire(client, bob)
    assert new.status_code == 201
    assert release(client, alice, old).status_code == 404
    assert release(client, bob, new.json["data"]["lease_id"]).status_code == 200


def test_an_expired_lease_nobody_replaced_can_still_be_released(client, clock, alice):
    lease_id = acquire(client, alice, ttl_seconds=10).json["data"]["lease_id"]
    clock.advance(3600)
    assert release(client, alice, lease_id).status_code == 200


def test_release_answers_the_id_and_time_then_404(client, clock, alice, bob):
    lease_id = acquire(client, alice).json["data"]["lease_id"]
    clock.advance(1)
    result = release(client, alice, lease_id)
    assert result.status_code == 200
    assert result.json == {
        "data": {"lease_id": lease_id, "released_at": "2026-07-30T10:48:14.829Z"}
    }
    assert release(client, alice, lease_id).status_code == 404
    assert acquire(client, bob).status_code == 201


def test_release_by_another_principal_or_organization_is_404(client, services, key, alice, bob):
    lease_id = acquire(client, alice).json["data"]["lease_id"]
    intruder = key("umbra", "agent_alice")
    before = event_count(services)
    for caller in (bob, intruder):
        result = release(client, caller, lease_id)
        assert result.status_code == 404
        assert result.json["error"]["code"] == "NOT_FOUND"
    assert event_count(services) == before
    assert acquire(client, bob).status_code == 409


def test_an_operator_of_the_organization_may_release_and_is_recorded(
    client, services, key, alice, bob
):
    lease_id = acquire(client, alice).json["data"]["lease_id"]
    foreign_operator = key("umbra", "ops", role="operator")
    assert release(client, foreign_operator, lease_id).status_code == 404
    operator = key("acme", "ops", role="operator")
    assert release(client, operator, lease_id).status_code == 200
    last = services.app.recorder.select_notifications(start=event_count(services), limit=1)[0]
    event = services.app.mapper.to_domain_event(last)
    assert (type(event).__name__, event.released_by, event.by_operator) == (
        "Released",
        "ops",
        True,
    )
    assert acquire(client, bob).status_code == 201


def test_unknown_lease_id_is_404(client, alice):
    assert release(client, alice, "lease_" + "0" * 32).status_code == 404
    assert release(client, alice, "nonsense").status_code == 404


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({k: v for k, v in ACQUIRE.items() if k != "resource_id"}, "Missing field: resource_id."),
        ({**ACQUIRE, "holder": "x"}, "Unknown field: holder."),
        ({**ACQUIRE, "ttl_seconds": "600"}, "ttl_seconds must be of type integer."),
        ({**ACQUIRE, "ttl_seconds": 600.5}, "ttl_seconds must be of type integer."),
        ({**ACQUIRE, "ttl_seconds": True}, "ttl_seconds must be of type integer."),
        ({**ACQUIRE, "ttl_seconds": 9}, "ttl_seconds must be from 10 to 86400."),
        ({**ACQUIRE, "ttl_seconds": 86_401}, "ttl_seconds must be from 10 to 86400."),
        ({**ACQUIRE, "resource_type": ""}, "resource_type must not be empty."),
        ({**ACQUIRE, "resource_id": "x" * 201}, "resource_id must be at most 200 characters."),
        ({**ACQUIRE, "purpose": "p" * 1001}, "purpose must be at most 1000 characters."),
        ({**ACQUIRE, "resource_id": "a\nb"}, "resource_id must not contain control characters."),
        ({**ACQUIRE, "purpose": None}, "purpose must be of type string."),
        ({**ACQUIRE, "purpose": "nul\u0000byte"}, "purpose must not contain control characters."),
        ({**ACQUIRE, "purpose": "half \ud800"}, "purpose must not contain control characters."),
        ({**ACQUIRE, "resource_id": "\udfff"}, "resource_id must not contain control characters."),
        ([ACQUIRE], "The request body must be a JSON object."),
    ],
)
def test_invalid_bodies_are_400_naming_the_field_and_change_nothing(
    client, services, alice, bob, body, message
):
    before = event_count(services)
    result = client.simulate_post(
        "/v1/leases",
        body=json.dumps(body),  # ASCII with \u escapes, as any client may send a lone surrogate
        headers={**bearer(alice), "content-type": "application/json"},
    )
    assert result.status_code == 400
    assert result.json == {"error": {"code": "VALIDATION_ERROR", "message": message}}
    assert event_count(services) == before
    assert acquire(client, bob).status_code == 201


def test_a_purpose_may_span_lines_and_the_projections_keep_working(client, services, alice, bob):
    result = acquire(client, alice, purpose="line one\n\tline two")
    assert result.status_code == 201
    assert acquire(client, bob, resource_id="next").status_code == 201
    last = services.app.recorder.max_notification_id()
    assert set(services.projector.positions().values()) == {last}
    assert services.projector.verify("lease_index") is None


def test_malformed_json_is_400(client, services, alice):
    result = client.simulate_post(
        "/v1/leases",
        body='{"resource_type": ',
        headers={**bearer(alice), "content-type": "application/json"},
    )
    assert result.status_code == 400
    assert result.json["error"]["code"] == "VALIDATION_ERROR"
    assert result.json["error"]["message"].startswith("The request body is not valid JSON")
    assert event_count(services) == 0


def test_a_ttl_written_as_a_whole_float_is_accepted(client, alice):
    assert (
        acquire(client, alice, ttl_seconds=600.0)
        .json["data"]["expires_at"]
        .endswith("10:58:13.829Z")
    )


def test_non_json_media_type_is_415(client, alice):
    result = client.simulate_post(
        "/v1/leases", body="resource=x", headers={**bearer(alice), "content-type": "text/plain"}
    )
    assert result.status_code == 415
    assert result.json["error"]["code"] == "UNSUPPORTED_MEDIA_TYPE"


def test_bodies_over_one_mebibyte_are_413(client, services, alice):
    body = '{"purpose": "' + "x" * (1024 * 1024) + '"}'
    result = client.simulate_post(
        "/v1/leases", body=body, headers={**bearer(alice), "content-type": "application/json"}
    )
    assert result.status_code == 413
    assert result.json["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert event_count(services) == 0


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer titen_nope"}, {"authorization": "Basic abc"}],
)
def test_missing_or_unknown_keys_are_401(client, services, headers):
    result = client.simulate_post("/v1/leases", json=ACQUIRE, headers=headers)
    assert result.status_code == 401
    assert result.json["error"]["code"] == "UNAUTHORIZED"
    assert event_count(services) == 0


def test_a_revoked_key_is_refused_at_once(client, services, alice):
    assert acquire(client, alice).status_code == 201
    services.keys.revoke("acme", principal="agent_alice", key_prefix=None)
    assert acquire(client, alice).status_code == 401


def test_unknown_routes_and_methods_answer_in_the_envelope(client, alice):
    missing = client.simulate_get("/v1/nothing", headers=bearer(alice))
    assert (missing.status_code, missing.json["error"]["code"]) == (404, "NOT_FOUND")
    for method in ("PUT", "PATCH"):
        result = client.simulate_request(method, "/v1/leases", headers=bearer(alice))
        assert (result.status_code, result.json["error"]["code"]) == (405, "METHOD_NOT_ALLOWED")
    result = client.simulate_post("/v1/leases/lease_x", headers=bearer(alice))
    assert result.status_code == 405


def test_an_internal_failure_is_500_without_details(client, services, alice):
    lease_id = acquire(client, alice).json["data"]["lease_id"]
    with services.store.writing() as writer:
        writer.execute("DROP TABLE {lease_index}")  # a release looks its lease up there
    result = release(client, alice, lease_id)
    assert result.status_code == 500
    assert result.json == {"error": {"code": "INTERNAL", "message": "Internal error."}}


def test_any_request_declaring_a_body_over_one_mebibyte_is_413(client, services, alice):
    lease_id = acquire(client, alice).json["data"]["lease_id"]
    result = client.simulate_delete(
        f"/v1/leases/{lease_id}", body="x" * (1024 * 1024 + 1), headers=bearer(alice)
    )
    assert (result.status_code, result.json["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert release(client, alice, lease_id).status_code == 200


def test_a_command_whose_read_model_write_fails_stores_no_event(client, services, alice):
    """The read models are written in the command's own transaction: when that fails, the
    whole command fails, records nothing, and a retry once the fault is gone succeeds."""
    with services.store.writing() as writer:
        writer.execute("ALTER TABLE {event_log} RENAME TO event_log_away")  # the fault
    before = event_count(services)
    positions = services.projector.positions()

    result = acquire(client, alice)

    assert (result.status_code, result.json["error"]["code"]) == (500, "INTERNAL")
    assert event_count(services) == before
    assert services.projector.positions() == positions
    assert services.lease_index.rows() == [] and services.lease_directory.rows() == []
    with services.store.writing() as writer:
        writer.execute("ALTER TABLE {event_log_away} RENAME TO event_log")
    lease_id = acquire(client, alice).json["data"]["lease_id"]
    assert release(client, alice, lease_id).status_code == 200
    for name in services.projector.projections:
        assert services.projector.verify(name) is None, name
