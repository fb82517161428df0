"""The webhook subscription routes and their errors, in-process, on SQLite and PostgreSQL."""

from __future__ import annotations

import falcon.testing
import pytest

from tests.support import bearer
from titen.api.rest.app import create_app
from titen.api.rest.settings import ServerSettings
from titen.domain.events import PUBLISHED

URL = "http://127.0.0.1:9/hook"
PUBLIC_URL = "http://93.184.216.34/hook"  # a public literal: nothing to resolve


@pytest.fixture
def loopback_client(services):
    """The app as `titen serve --allow-private-webhooks` runs it."""
    return falcon.testing.TestClient(
        create_app(services, ServerSettings(allow_private_webhooks=True))
    )


def subscribe(client, key, **body):
    return client.simulate_post("/v1/webhooks", json={"url": URL, **body}, headers=bearer(key))


def test_create_answers_the_subscription_and_its_secret_once(loopback_client, alice):
    created = subscribe(loopback_client, alice)
    assert created.status_code == 201
    data = created.json["data"]
    assert data["webhook_id"].startswith("whk_")
    assert data["secret"].startswith("whsec_")
    assert data["url"] == URL
    assert data["types"] == list(PUBLISHED)
    assert data["to_principal"] is None
    assert data["status"] == "active"
    assert data["created_at"].endswith("Z")
    shown = loopback_client.simulate_get(
        f"/v1/webhooks/{data['webhook_id']}", headers=bearer(alice)
    ).json["data"]
    assert shown == {k: v for k, v in data.items() if k != "secret"}


def test_types_and_to_principal_are_kept(loopback_client, key, alice):
    key("acme", "agent_bob")
    data = subscribe(
        loopback_client,
        alice,
        types=["handoff.created", "handoff.accepted", "handoff.created"],
        to_principal="agent_bob",
    ).json["data"]
    assert data["types"] == ["handoff.created", "handoff.accepted"]
    assert data["to_principal"] == "agent_bob"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com/x"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": "http:///path"}, "url"),
        ({"url": "http://user:pw@example.com/"}, "url"),
        ({"url": "http://example.com:99999/"}, "url"),
        ({"url": ""}, "url"),
        ({"url": URL, "types": []}, "types"),
        ({"url": URL, "types": ["lease.released"]}, "types"),
        ({"url": URL, "types": "lease.acquired"}, "types"),
        ({"url": URL, "to_principal": "agent_nobody"}, "to_principal"),
        ({"url": URL, "secret": "mine"}, "secret"),
    ],
)
def test_bad_input_is_a_validation_error_naming_the_field(loopback_client, alice, body, field):
    answer = loopback_client.simulate_post("/v1/webhooks", json=body, headers=bearer(alice))
    assert answer.status_code == 400, answer.json
    assert answer.json["error"]["code"] == "VALIDATION_ERROR"
    assert field in answer.json["error"]["message"]
    listed = loopback_client.simulate_get("/v1/webhooks", headers=bearer(alice))
    assert listed.json["data"]["webhooks"] == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "https://10.1.2.3/hook",
        "http://192.168.0.10/",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:8080/",
        "http://[::ffff:127.0.0.1]/",
        "http://224.0.0.1/",
        "http://0.0.0.0/",
    ],
)
def test_private_targets_are_refused_unless_allowed(client, alice, url):
    answer = client.simulate_post("/v1/webhooks", json={"url": url}, headers=bearer(alice))
    assert answer.status_code == 400
    assert answer.json["error"]["message"].startswith("url host")
    assert client.simulate_get("/v1/webhooks", headers=bearer(alice)).json["data"]["webhooks"] == []


def test_unresolvable_host_is_refused(client, alice):
    answer = client.simulate_post(
        "/v1/webhooks", json={"url": "https://no-such-host.invalid/"}, headers=bearer(alice)
    )
    assert answer.status_code == 400
    assert answer.json["error"]["message"] == (
        "url host no-such-host.invalid is not allowed: webhooks may only target hosts that"
        " resolve to public internet addresses."
    )


def test_a_public_address_is_accepted_without_the_flag(client, alice):
    answer = client.simulate_post("/v1/webhooks", json={"url": PUBLIC_URL}, headers=bearer(alice))
    assert answer.status_code == 201


def test_the_101st_subscription_is_refused(loopback_client, alice, key):
    for _ in range(100):
        assert subscribe(loopback_client, alice).status_code == 201
    refused = subscribe(loopback_client, alice)
    assert refused.status_code == 400
    assert refused.json["error"] == {
        "code": "VALIDATION_ERROR",
        "message": "A principal may hold at most 100 webhooks.",
    }
    listed = loopback_client.simulate_get("/v1/webhooks?limit=500", headers=bearer(alice))
    assert len(listed.json["data"]["webhooks"]) == 100
    assert subscribe(loopback_client, key("acme", "agent_other")).status_code == 201


def test_list_pages_oldest_first_and_shows_only_the_callers_own(loopback_client, alice, key):
    bob = key("acme", "agent_bob")
    ops = key("acme", "ops", role="operator")
    mine = [subscribe(loopback_client, alice).json["data"]["webhook_id"] for _ in range(5)]
    theirs = subscribe(loopback_client, bob).json["data"]["webhook_id"]
    seen, cursor = [], None
    while True:
        query = "limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = loopback_client.simulate_get(f"/v1/webhooks?{query}", headers=bearer(alice))
        assert page.status_code == 200
        seen += [w["webhook_id"] for w in page.json["data"]["webhooks"]]
        assert all("secret" not in w for w in page.json["data"]["webhooks"])
        cursor = page.json["data"]["next_cursor"]
        if cursor is None:
            break
    assert seen == mine
    everyone = loopback_client.simulate_get("/v1/webhooks", headers=bearer(ops)).json["data"]
    assert [w["webhook_id"] for w in everyone["webhooks"]] == [*mine, theirs]
    bad = loopback_client.simulate_get("/v1/webhooks?cursor=nope", headers=bearer(alice))
    assert bad.status_code == 400


def test_others_get_404_on_every_route_and_operators_may_use_them(loopback_client, alice, key):
    webhook_id = subscribe(loopback_client, alice).json["data"]["webhook_id"]
    bob = key("acme", "agent_bob")
    stranger = key("umbra", "ops", role="operator")
    ops = key("acme", "ops", role="operator")
    routes = [
        ("GET", f"/v1/webhooks/{webhook_id}"),
        ("GET", f"/v1/webhooks/{webhook_id}/deliveries"),
        ("POST", f"/v1/webhooks/{webhook_id}/rotate-secret"),
        ("POST", f"/v1/webhooks/{webhook_id}/enable"),
        ("DELETE", f"/v1/webhooks/{webhook_id}"),
    ]
    for who in (bob, stranger):
        for method, path in routes:
            answer = loopback_client.simulate_request(method, path, headers=bearer(who))
            assert answer.status_code == 404, (method, path)
            assert answer.json["error"]["message"] == f"No webhook {webhook_id}."
    for method, path in routes:
        answer = loopback_client.simulate_request(method, path, headers=bearer(ops))
        assert answer.status_code == 200, (method, path, answer.json)
    gone = loopback_client.simulate_get(f"/v1/webhooks/{webhook_id}", headers=bearer(alice))
    assert gone.status_code == 404


def test_delete_then_everything_is_404(loopback_client, alice):
    webhook_id = subscribe(loopback_client, alice).json["data"]["webhook_id"]
    deleted = loopback_client.simulate_delete(f"/v1/webhooks/{webhook_id}", headers=bearer(alice))
    assert deleted.status_code == 200
    assert set(deleted.json["data"]) == {"webhook_id", "deleted_at"}
    assert deleted.json["data"]["webhook_id"] == webhook_id
    again = loopback_client.simulate_delete(f"/v1/webhooks/{webhook_id}", headers=bearer(alice))
    assert again.status_code == 404
    listed = loopback_client.simulate_get("/v1/webhooks", headers=bearer(alice))
    assert listed.json["data"]["webhooks"] == []


def test_rotate_secret_answers_a_new_secret_and_get_never_shows_one(loopback_client, alice):
    created = subscribe(loopback_client, alice).json["data"]
    path = f"/v1/webhooks/{created['webhook_id']}"
    rotated = loopback_client.simulate_post(f"{path}/rotate-secret", headers=bearer(alice))
    assert rotated.status_code == 200
    assert rotated.json["data"]["secret"].startswith("whsec_")
    assert rotated.json["data"]["secret"] != created["secret"]
    assert "secret" not in loopback_client.simulate_get(path, headers=bearer(alice)).json["data"]


def test_deliveries_start_empty_and_check_their_query(loopback_client, alice):
    webhook_id = subscribe(loopback_client, alice).json["data"]["webhook_id"]
    path = f"/v1/webhooks/{webhook_id}/deliveries"
    answer = loopback_client.simulate_get(path, headers=bearer(alice))
    assert answer.json == {"data": {"deliveries": [], "next_cursor": None}}
    for query in ("limit=0", "cursor=x", "since=1"):
        assert (
            loopback_client.simulate_get(f"{path}?{query}", headers=bearer(alice)).status_code
            == 400
        )


def test_unknown_ids_are_404(loopback_client, alice):
    for path in ("/v1/webhooks/whk_nope", "/v1/webhooks/whk_nope/deliveries"):
        assert loopback_client.simulate_get(path, headers=bearer(alice)).status_code == 404
