"""Input that once answered 500 (issue 16): each a 4xx in the envelope, nothing recorded, on
SQLite and PostgreSQL.

Deeply nested JSON (in the body, inside a field, or inside a cursor), `as_of` whose UTC form
leaves years 1-9999, cursors beyond a signed 64-bit position, and path ids holding NUL or
another control character (PostgreSQL's text cannot hold NUL at all).
"""

from __future__ import annotations

import base64

import pytest

from tests.support import bearer
from titen.domain.cursors import unsealed_cursor

LEASE = {"resource_type": "deploy", "resource_id": "r", "purpose": "p", "ttl_seconds": 60}
HANDOFF = {"to_principal": "agent_alice", "subject_id": "s"}
DEEP = 100_000


def recorded(services) -> int:
    return services.app.recorder.max_notification_id() or 0


def post(client, key, path, text):
    headers = {**bearer(key), "content-type": "application/json"}
    return client.simulate_post(path, body=text, headers=headers)


def refused(answer, status: int = 400) -> str:
    assert answer.status_code == status, answer.text
    assert set(answer.json) == {"error"}
    return answer.json["error"]["message"]


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("/v1/leases", "[" * DEEP),
        ("/v1/leases", "[" * DEEP + "]" * DEEP),
        ("/v1/leases", '{"resource_type": ' + "[" * DEEP + "]" * DEEP + "}"),
        ("/v1/leases", '{"resource_type": ' + "[" * 40 + "]" * 40 + "}"),
        ("/v1/handoffs", '{"to_principal": "agent_alice", "message": ' + '{"a": ' * DEEP),
        ("/v1/handoffs", '{"subject_id": ' + '{"a": ' * 500 + "1" + "}" * 501),
        ("/v1/webhooks", '{"url": "http://x/", "types": ' + "[" * DEEP + "]" * DEEP + "}"),
        ("/v1/handoffs/hoff_x/resolve", '{"status": ' + "[" * DEEP + "]" * DEEP + "}"),
    ],
)
def test_deeply_nested_json_is_a_400(client, services, alice, path, text):
    before = recorded(services)
    message = refused(post(client, alice, path, text))
    assert message == "The request body is nested too deeply: at most 32 levels."
    assert recorded(services) == before


def test_nesting_within_the_limit_is_judged_by_the_schema(client, alice):
    text = '{"resource_type": ' + "[" * 31 + "]" * 31 + "}"  # 32 levels with the object
    assert refused(post(client, alice, "/v1/leases", text)) == "Missing field: resource_id."


@pytest.mark.parametrize(
    "as_of",
    ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0000-01-01T00:00:00Z"],
)
def test_as_of_beyond_the_calendar_is_a_400(client, ops, as_of):
    query = {"as_of": as_of}
    routes = [
        ("/v1/audit/leases", {**query, "resource_type": "deploy", "resource_id": "r"}),
        ("/v1/audit/leases/lease_" + "0" * 32, query),
        ("/v1/audit/handoffs/hoff_" + "0" * 32, query),
    ]
    for path, params in routes:
        answer = client.simulate_get(path, params=params, headers=bearer(ops))
        assert refused(answer).startswith("as_of must be an instant"), path


def sealed(value: object) -> str:
    """A cursor shaped like ours, around any JSON text."""
    return base64.urlsafe_b64encode(str(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        unsealed_cursor(2**63),
        unsealed_cursor(2**64),
        unsealed_cursor(10**40),
        sealed("[" * 5000),
        sealed('{"v": 1, "after": ' + "[" * 5000),
    ],
)
def test_a_cursor_beyond_any_position_is_a_400(client, alice, cursor):
    created = client.simulate_post(
        "/v1/webhooks", json={"url": "http://93.184.216.34/"}, headers=bearer(alice)
    )
    webhook_id = created.json["data"]["webhook_id"]
    for path, name in [
        ("/v1/handoffs", "cursor"),
        ("/v1/events", "after"),
        ("/v1/webhooks", "cursor"),
        (f"/v1/webhooks/{webhook_id}/deliveries", "cursor"),
    ]:
        answer = client.simulate_get(path, params={name: cursor}, headers=bearer(alice))
        assert refused(answer) == f"{name} is not valid: pass next_cursor from the previous page."


def test_the_largest_position_is_still_a_cursor(client, services, alice):
    largest = services.cursors.seal(2**63 - 1)
    answer = client.simulate_get("/v1/handoffs", params={"cursor": largest}, headers=bearer(alice))
    assert answer.status_code == 200
    assert answer.json["data"] == {"handoffs": [], "next_cursor": None}


@pytest.mark.parametrize("char", ["%00", "%0A", "%1F", "%7F", "%C2%85"])
def test_a_path_id_with_a_control_character_is_not_found(client, services, alice, ops, char):
    client.simulate_post("/v1/leases", json=LEASE, headers=bearer(alice))
    before = recorded(services)
    for method, path, key in [
        ("DELETE", f"/v1/leases/lease_{char}abc", alice),
        ("GET", f"/v1/leases/lease_{char}abc", alice),
        ("GET", f"/v1/handoffs/hoff_{char}abc", alice),
        ("POST", f"/v1/handoffs/hoff_{char}abc/resolve", alice),
        ("GET", f"/v1/webhooks/whk_{char}abc", alice),
        ("DELETE", f"/v1/webhooks/whk_{char}abc", alice),
        ("POST", f"/v1/webhooks/whk_{char}abc/rotate-secret", alice),
        ("POST", f"/v1/webhooks/whk_{char}abc/enable", alice),
        ("GET", f"/v1/webhooks/whk_{char}abc/deliveries", alice),
        ("GET", f"/v1/audit/leases/lease_{char}abc", ops),
        ("GET", f"/v1/audit/handoffs/hoff_{char}abc", ops),
    ]:
        body = {"status": "accepted"} if path.endswith("resolve") else None
        answer = client.simulate_request(method, path, json=body, headers=bearer(key))
        assert refused(answer, 404) == "Not found.", (method, path)
    assert recorded(services) == before


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"resource_type": "deploy", "resource_id": "r", "purpose": "p", "ttl_seconds": '
            + b"9" * 5000
            + b"}",
            "The request body holds a number of more than 4300 digits.",
        ),
        (
            b'{"resource_type": "deploy",',
            "The request body is not valid JSON (at line 1, column 28).",
        ),
        (b'{"a": 1} {"b": 2}', "The request body is not valid JSON (at line 1, column 10)."),
        (b'{"a": "\xff"}', "The request body is not valid JSON: it is not UTF-8, -16 or -32 text."),
    ],
)
def test_a_body_json_cannot_read_is_refused_in_titens_words(services, client, alice, body, message):
    before = recorded(services)
    answer = refused(post(client, alice, "/v1/leases", body))
    assert answer == message
    assert recorded(services) == before
