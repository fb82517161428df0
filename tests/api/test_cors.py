"""CORS for the origins `titen serve --cors-origin` names: every route, errors included; a
preflight answered without a key; nothing for other origins, nor when none is named."""

from __future__ import annotations

import re

import falcon.testing
import pytest

from tests.support import bearer
from titen.api.rest.app import ROUTES, create_app
from titen.api.rest.settings import ServerSettings, parse_origin

ORIGIN = "http://app.test:8080"


@pytest.fixture
def cors_client(services) -> falcon.testing.TestClient:
    settings = ServerSettings(cors_origins=(ORIGIN, "https://other.test"))
    return falcon.testing.TestClient(create_app(services, settings))


def test_a_preflight_is_answered_on_every_route_without_a_key(cors_client):
    for template, resource in ROUTES:
        path = re.sub(r"{\w+}", "missing", template)
        for method in resource.contract:
            answer = cors_client.simulate_options(
                path,
                headers={
                    "Origin": ORIGIN,
                    "Access-Control-Request-Method": method,
                    "Access-Control-Request-Headers": "authorization, content-type, last-event-id",
                },
            )
            assert answer.status_code == 200, path
            assert answer.headers["access-control-allow-origin"] == ORIGIN
            assert method in answer.headers["access-control-allow-methods"].split(", ")
            assert "authorization" in answer.headers["access-control-allow-headers"]
            assert "access-control-allow-credentials" not in answer.headers


def test_answers_and_errors_carry_cors_headers_for_a_named_origin(cors_client, alice):
    origin = {"Origin": ORIGIN}
    ok = cors_client.simulate_get("/v1/events", headers={**origin, **bearer(alice)})
    refused = cors_client.simulate_get("/v1/events", headers=origin)
    missing = cors_client.simulate_get("/v1/nothing", headers=origin)
    for answer, status in ((ok, 200), (refused, 401), (missing, 404)):
        assert answer.status_code == status
        assert answer.headers["access-control-allow-origin"] == ORIGIN
        exposed = answer.headers["access-control-expose-headers"]
        assert "X-Request-Id" in exposed and "WWW-Authenticate" in exposed
        assert "Mcp-Session-Id" in exposed  # an MCP client in a page reads its session id


def test_other_origins_and_servers_without_origins_get_no_cors(cors_client, client, alice):
    stranger = cors_client.simulate_get(
        "/v1/events", headers={"Origin": "http://evil.test", **bearer(alice)}
    )
    assert stranger.status_code == 200
    assert "access-control-allow-origin" not in stranger.headers
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    plain = client.simulate_options("/v1/leases", headers=preflight)  # no --cors-origin
    assert plain.status_code == 200  # OPTIONS itself is still answered
    assert not any(name.startswith("access-control-") for name in plain.headers)


def test_origins_are_checked_and_written_as_browsers_send_them():
    assert parse_origin("HTTPS://App.Example.com") == "https://app.example.com"
    assert parse_origin("https://app.example.com:443") == "https://app.example.com"
    assert parse_origin("http://localhost:8080") == "http://localhost:8080"
    assert parse_origin("http://[::1]:9000") == "http://[::1]:9000"
    for bad in (
        "*",
        "null",
        "app.example.com",
        "https://app.example.com/",
        "https://x/p",
        "ftp://x",
        "https://u@x",
        "http://x:99999",
        "https://x?q",
        "https://x#f",
    ):
        with pytest.raises(ValueError, match="is not an origin"):
            parse_origin(bad)
