"""The handoff routes and their errors, as the spec and issue 3 say, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re

import pytest

from tests.support import bearer
from titen.domain.handoff import Handoff
from titen.domain.ids import HANDOFF, to_uuid

SPEC = {
    "to_principal": "agent_reviewer",
    "subject_id": "user_rama",
    "checkpoint_id": "ckpt_713be19162544650a85b76b5ef6d7543",
    "message": "Smoke passed, needs approval to promote.",
}
NOT_TARGET = {
    "error": {
        "code": "VALIDATION_ERROR",
        "message": "Only the target principal can resolve a handoff.",
    }
}


@pytest.fixture
def bystander(key):
    return key("acme", "agent_bystander")


@pytest.fixture
def outsider(key):
    """Same principal name as the reviewer, in another organization."""
    return key("umbra", "agent_reviewer")


def create(client, key, **changes):
    """POST a handoff; the body is ASCII JSON, so even a lone surrogate reaches the server."""
    return client.simulate_post(
        "/v1/handoffs",
        body=json.dumps({**SPEC, **changes}),
        headers={**bearer(key), "content-type": "application/json"},
    )


def created(client, key, **changes) -> str:
    result = create(client, key, **changes)
    assert result.status_code == 201, result.text
    return result.json["data"]["handoff_id"]


def inbox(client, key, **params):
    result = client.simulate_get("/v1/handoffs", params=params, headers=bearer(key))
    assert result.status_code == 200, result.text
    return result.json["data"]


def show(client, key, handoff_id):
    return client.simulate_get(f"/v1/handoffs/{handoff_id}", headers=bearer(key))


def resolve(client, key, handoff_id, status="accepted"):
    return client.simulate_post(
        f"/v1/handoffs/{handoff_id}/resolve", json={"status": status}, headers=bearer(key)
    )


def event_count(services) -> int:
    return services.app.recorder.max_notification_id() or 0


def history(services, handoff_id) -> list[str]:
    key = to_uuid(HANDOFF, handoff_id)
    return [type(e).__name__ for e in services.app.events.get(key)]


def test_create_returns_a_pending_handoff_id(client, sender, reviewer):
    result = create(client, sender)
    assert result.status_code == 201
    assert set(result.json) == {"data"}
    assert set(result.json["data"]) == {"handoff_id", "status"}
    assert re.fullmatch(r"hoff_[0-9a-f]{32}", result.json["data"]["handoff_id"])
    assert result.json["data"]["status"] == "pending"


def test_the_target_sees_it_in_its_inbox_exactly_as_the_spec_shows(client, sender, reviewer):
    handoff_id = created(client, sender)
    assert inbox(client, reviewer) == {
        "handoffs": [
            {
                "handoff_id": handoff_id,
                "from_principal": "agent_sender",
                "to_principal": "agent_reviewer",
                "subject_id": "user_rama",
                "context_id": None,
                "checkpoint_id": "ckpt_713be19162544650a85b76b5ef6d7543",
                "message": "Smoke passed, needs approval to promote.",
                "status": "pending",
                "created_at": "2026-07-30T10:48:13.829Z",
            }
        ],
        "next_cursor": None,
    }


def test_the_senders_own_list_is_empty(client, sender, reviewer):
    created(client, sender)
    assert inbox(client, sender) == {"handoffs": [], "next_cursor": None}


def test_optional_fields_are_recorded_as_given(client, sender, reviewer):
    handoff_id = created(
        client,
        sender,
        context_id="ctx_any opaque-ref/1",
        message="line one\nline two\ttabbed, ünïcode ✓",
    )
    item = inbox(client, reviewer)["handoffs"][0]
    assert item["context_id"] == "ctx_any opaque-ref/1"
    assert item["message"] == "line one\nline two\ttabbed, ünïcode ✓"
    assert show(client, sender, handoff_id).json["data"]["message"] == item["message"]


def test_only_required_fields(client, sender, reviewer):
    result = client.simulate_post(
        "/v1/handoffs",
        json={"to_principal": "agent_reviewer", "subject_id": "s"},
        headers=bearer(sender),
    )
    assert result.status_code == 201
    item = inbox(client, reviewer)["handoffs"][0]
    assert (item["context_id"], item["checkpoint_id"], item["message"]) == (None, None, None)


def test_sender_and_target_can_read_one_handoff(client, sender, reviewer):
    handoff_id = created(client, sender)
    for key in (sender, reviewer):
        result = show(client, key, handoff_id)
        assert result.status_code == 200
        assert result.json["data"] == {
            **inbox(client, reviewer)["handoffs"][0],
            "resolved_at": None,
        }


def test_nobody_else_can_read_one_handoff(client, services, sender, reviewer, bystander, outsider):
    handoff_id = created(client, sender)
    lease_key = services.app.resource_keys.of("acme", "deploy", "x")
    unknown = [
        handoff_id.upper().replace("HOFF_", "hoff_"),  # not the canonical spelling
        "hoff_" + "0" * 32,
        "hoff_xyz",
        "lease_" + handoff_id.removeprefix("hoff_"),
        "hoff_" + lease_key.hex,  # an aggregate that is not a handoff
    ]
    client.simulate_post(
        "/v1/leases",
        json={"resource_type": "deploy", "resource_id": "x", "purpose": "p", "ttl_seconds": 60},
        headers=bearer(sender),
    )
    for key in (bystander, outsider):
        result = show(client, key, handoff_id)
        assert result.status_code == 404
        assert result.json == {
            "error": {"code": "NOT_FOUND", "message": f"No handoff {handoff_id}."}
        }
    for handoff in unknown:
        assert show(client, sender, handoff).status_code == 404


@pytest.mark.parametrize("status", ["accepted", "rejected"])
def test_the_target_resolves_once(client, services, clock, sender, reviewer, status):
    handoff_id = created(client, sender)
    clock.advance(61.5)
    result = resolve(client, reviewer, handoff_id, status)
    assert result.status_code == 200
    resolved = result.json["data"]
    assert resolved["status"] == status
    assert resolved["resolved_at"] == "2026-07-30T10:49:15.329Z"
    assert resolved["created_at"] == "2026-07-30T10:48:13.829Z"
    assert show(client, sender, handoff_id).json["data"] == resolved
    assert inbox(client, reviewer)["handoffs"] == []

    for again in ("accepted", "rejected"):
        result = resolve(client, reviewer, handoff_id, again)
        assert result.status_code == 404
        assert result.json == {
            "error": {"code": "NOT_FOUND", "message": f"No pending handoff {handoff_id}."}
        }
    assert history(services, handoff_id) == ["Created", status.capitalize()]
    assert show(client, reviewer, handoff_id).json["data"]["status"] == status


def test_the_sender_cannot_resolve_on_the_recipients_behalf(
    client, services, sender, reviewer, bystander
):
    handoff_id = created(client, sender)
    before = event_count(services)
    for status in ("accepted", "rejected"):
        result = resolve(client, sender, handoff_id, status)
        assert result.status_code == 400
        assert result.json == NOT_TARGET
    assert event_count(services) == before
    assert show(client, sender, handoff_id).json["data"]["status"] == "pending"
    assert len(inbox(client, reviewer)["handoffs"]) == 1


def test_a_bystander_resolving_finds_nothing_as_get_answers_it(
    client, services, sender, reviewer, bystander
):
    handoff_id = created(client, sender)
    before = event_count(services)
    unknown = resolve(client, bystander, "hoff_" + "0" * 32, "accepted")
    assert show(client, bystander, handoff_id).status_code == 404
    for status in ("accepted", "rejected"):
        result = resolve(client, bystander, handoff_id, status)
        assert result.status_code == 404
        assert result.json == {
            "error": {"code": "NOT_FOUND", "message": f"No pending handoff {handoff_id}."}
        }
        assert result.json["error"]["code"] == unknown.json["error"]["code"]
    assert event_count(services) == before
    assert show(client, sender, handoff_id).json["data"]["status"] == "pending"
    assert len(inbox(client, reviewer)["handoffs"]) == 1


def test_unknown_or_foreign_handoffs_are_not_found_on_resolve(
    client, services, sender, reviewer, outsider
):
    handoff_id = created(client, sender)
    before = event_count(services)
    for key, target in [
        (outsider, handoff_id),
        (reviewer, "hoff_" + "0" * 32),
        (reviewer, "hoff_nothex"),
        (reviewer, handoff_id.upper().replace("HOFF_", "hoff_")),
        (reviewer, "hoff_" + services.app.resource_keys.of("acme", "deploy", "x").hex),
    ]:
        result = resolve(client, key, target)
        assert result.status_code == 404
        assert result.json["error"]["code"] == "NOT_FOUND"
    assert event_count(services) == before


def test_a_principal_of_another_organization_can_neither_see_resolve_nor_target(
    client, services, sender, reviewer, outsider, key
):
    handoff_id = created(client, sender)
    assert inbox(client, outsider) == {"handoffs": [], "next_cursor": None}
    assert show(client, outsider, handoff_id).status_code == 404
    assert resolve(client, outsider, handoff_id).status_code == 404

    key("umbra", "agent_umbra_only")
    result = create(client, sender, to_principal="agent_umbra_only")
    assert result.status_code == 400
    assert result.json["error"]["message"] == (
        "to_principal is not a principal of this organization."
    )
    # The outsider's own handoff to its colleague does not reach acme's agent_reviewer.
    key("umbra", "agent_colleague")
    outsider_handoff = created(client, outsider, to_principal="agent_colleague")
    assert [h["handoff_id"] for h in inbox(client, reviewer)["handoffs"]] == [handoff_id]
    assert show(client, reviewer, outsider_handoff).status_code == 404


def test_every_route_needs_a_key(client, sender, reviewer):
    handoff_id = created(client, sender)
    for method, path in [
        ("POST", "/v1/handoffs"),
        ("GET", "/v1/handoffs"),
        ("GET", f"/v1/handoffs/{handoff_id}"),
        ("POST", f"/v1/handoffs/{handoff_id}/resolve"),
    ]:
        result = client.simulate_request(method, path, json={"status": "accepted"})
        assert result.status_code == 401
        assert result.json["error"]["code"] == "UNAUTHORIZED"
    assert show(client, sender, handoff_id).json["data"]["status"] == "pending"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"to_principal": "agent_sender"}, "to_principal must not be the caller."),
        ({"to_principal": "agent_nobody"}, "to_principal is not a principal of this organization."),
        ({"to_principal": None}, "to_principal must be of type string."),
        ({"to_principal": ""}, "to_principal must not be empty."),
        ({"subject_id": ""}, "subject_id must not be empty."),
        ({"subject_id": 7}, "subject_id must be of type string."),
        ({"subject_id": "a\nb"}, "subject_id must not contain control characters."),
        ({"subject_id": "x" * 201}, "subject_id must be at most 200 characters."),
        ({"context_id": "c" * 201}, "context_id must be at most 200 characters."),
        ({"context_id": None}, "context_id must be of type string."),
        ({"checkpoint_id": "a\x00b"}, "checkpoint_id must not contain control characters."),
        ({"message": "m" * 4001}, "message must be at most 4000 characters."),
        ({"message": "nul\x00"}, "message must not contain control characters."),
        ({"message": "lone \ud800 surrogate"}, "message must not contain control characters."),
        ({"message": ""}, "message must not be empty."),
        ({"priority": "high"}, "Unknown field: priority."),
    ],
)
def test_bad_create_input_is_400_and_records_nothing(
    client, services, sender, reviewer, changes, message
):
    before = event_count(services)
    result = create(client, sender, **changes)
    assert result.status_code == 400, result.text
    assert result.json == {"error": {"code": "VALIDATION_ERROR", "message": message}}
    assert event_count(services) == before
    assert inbox(client, reviewer)["handoffs"] == []


def test_limits_are_inclusive(client, sender, reviewer):
    created(client, sender, subject_id="s" * 200, message="m" * 4000, context_id="c" * 200)


@pytest.mark.parametrize("field", ["to_principal", "subject_id"])
def test_required_fields(client, services, sender, reviewer, field):
    body = {k: v for k, v in SPEC.items() if k != field}
    result = client.simulate_post("/v1/handoffs", json=body, headers=bearer(sender))
    assert result.status_code == 400
    assert result.json["error"] == {
        "code": "VALIDATION_ERROR",
        "message": f"Missing field: {field}.",
    }
    assert event_count(services) == 0


def test_malformed_bodies(client, services, sender, reviewer):
    handoff_id = created(client, sender)
    before = event_count(services)
    for path in ("/v1/handoffs", f"/v1/handoffs/{handoff_id}/resolve"):
        not_json = client.simulate_post(
            path, body="{", headers={**bearer(reviewer), "content-type": "application/json"}
        )
        assert not_json.status_code == 400
        assert not_json.json["error"]["code"] == "VALIDATION_ERROR"
        listed = client.simulate_post(path, json=[1], headers=bearer(reviewer))
        assert listed.json["error"]["message"] == "The request body must be a JSON object."
        wrong_type = client.simulate_post(
            path, body="{}", headers={**bearer(reviewer), "content-type": "text/plain"}
        )
        assert wrong_type.status_code == 415
    assert event_count(services) == before


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "Missing field: status."),
        ({"status": "pending"}, "status must be one of: accepted, rejected."),
        ({"status": "ACCEPTED"}, "status must be one of: accepted, rejected."),
        ({"status": "accepted", "note": "x"}, "Unknown field: note."),
    ],
)
def test_bad_resolve_input_is_400_and_records_nothing(
    client, services, sender, reviewer, body, message
):
    handoff_id = created(client, sender)
    before = event_count(services)
    result = client.simulate_post(
        f"/v1/handoffs/{handoff_id}/resolve", json=body, headers=bearer(reviewer)
    )
    assert result.status_code == 400
    assert result.json == {"error": {"code": "VALIDATION_ERROR", "message": message}}
    assert event_count(services) == before
    assert show(client, reviewer, handoff_id).json["data"]["status"] == "pending"


def test_the_events_carry_what_a_subscriber_needs(client, services, sender, reviewer):
    handoff_id = created(client, sender)
    resolve(client, reviewer, handoff_id, "rejected")
    created_event, rejected = services.app.events.get(to_uuid(HANDOFF, handoff_id))
    assert isinstance(created_event, Handoff.Created)
    assert isinstance(rejected, Handoff.Rejected)
    for event in (created_event, rejected):
        assert event.organization == "acme"
        assert event.from_principal == "agent_sender"
        assert event.to_principal == "agent_reviewer"
        assert event.subject_id == "user_rama"
