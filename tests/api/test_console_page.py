"""GET /console (public, one page, a strict Content-Security-Policy) and GET /v1/me (what the
page reads to show only what the key may do)."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest

from tests.support import bearer
from titen.domain.published import PUBLISHED
from titen.service.roles import AGENT, OPERATOR, ROLES


def test_the_console_is_served_without_a_key_with_a_strict_policy(client):
    result = client.simulate_get("/console")
    assert result.status_code == 200
    assert result.headers["content-type"] == "text/html; charset=utf-8"
    policy = dict(
        part.split(" ", 1) for part in result.headers["content-security-policy"].split("; ")
    )
    assert policy["default-src"] == "'none'"
    assert policy["connect-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    page = result.text
    for tag, directive in (("script", "script-src"), ("style", "style-src")):
        (inlined,) = re.findall(rf"<{tag}>(.*?)</{tag}>", page, re.S)
        digest = base64.b64encode(hashlib.sha256(inlined.encode()).digest()).decode()
        assert policy[directive] == f"'sha256-{digest}'"  # that block, and nothing else
    assert "http://" not in page and "https://" not in page  # nothing from elsewhere
    assert f'data-event-types="{",".join(PUBLISHED)}"' in page
    assert '<input id="api-key" type="password"' in page and '<label for="api-key">API key' in page
    for name in ("Leases", "Handoffs", "Events", "History", "Webhooks"):
        assert f'<section aria-label="{name}"' in page


@pytest.mark.parametrize("role", ROLES)
def test_me_names_the_key_and_what_its_role_may_do(client, key, role):
    result = client.simulate_get("/v1/me", headers=bearer(key("acme", "someone", role=role)))
    assert result.status_code == 200
    assert result.headers["cache-control"] == "no-store"
    assert result.json["data"] == {
        "organization": "acme",
        "principal": "someone",
        "role": role,
        "reads_organization": role != AGENT,
        "releases_any_lease": role == OPERATOR,
        "reads_audit": role == OPERATOR,
    }


def test_me_needs_a_key(client):
    result = client.simulate_get("/v1/me")
    assert result.status_code == 401
    assert result.json["error"]["code"] == "UNAUTHORIZED"
