"""Identifiers that read alike are refused, not merged: REST answers 400 naming the field.

Identity stays byte-exact (nothing is normalised), so a name not in NFC, or holding an
invisible format character, a line break of any kind, or nothing but whitespace, is refused
before any command runs (titen.domain.identifiers); on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support import bearer

ACQUIRE = {"resource_type": "deploy", "resource_id": "café", "purpose": "p", "ttl_seconds": 60}
NFC = "must be in Unicode normalization form C (NFC)."
FORMAT = "must not contain invisible format characters (Unicode Cf)."
CONTROL = "must not contain control characters."
BLANK = "must not be only whitespace."

REFUSED = [
    ("cafe\u0301", NFC),  # café, decomposed
    ("caf\u200bé", FORMAT),  # a zero-width space
    ("\u202ecafé", FORMAT),  # a right-to-left override
    ("café\U000e0001", FORMAT),  # a language tag: a format character beyond the BMP
    ("café\n", CONTROL),  # a trailing newline
    ("café\u0085", CONTROL),  # NEXT LINE
    ("caf\u2028é", CONTROL),  # LINE SEPARATOR
    ("   ", BLANK),
    ("\u3000\u00a0", BLANK),
]


def post(client, key, path, body):
    return client.simulate_post(
        path,
        body=json.dumps(body),
        headers={**bearer(key), "content-type": "application/json"},
    )


def events(services) -> int:
    return services.app.recorder.max_notification_id() or 0


@pytest.mark.parametrize(("value", "reason"), REFUSED)
@pytest.mark.parametrize("field", ["resource_type", "resource_id"])
def test_an_acquire_with_a_look_alike_identifier_is_refused(
    client, services, alice, field, value, reason
):
    before = events(services)
    result = post(client, alice, "/v1/leases", {**ACQUIRE, field: value})
    assert result.status_code == 400
    assert result.json == {"error": {"code": "VALIDATION_ERROR", "message": f"{field} {reason}"}}
    assert events(services) == before


@pytest.mark.parametrize(("value", "reason"), REFUSED)
@pytest.mark.parametrize("field", ["to_principal", "subject_id", "context_id", "checkpoint_id"])
def test_a_handoff_with_a_look_alike_identifier_is_refused(
    client, services, alice, bob, field, value, reason
):
    body = {"to_principal": "agent_bob", "subject_id": "ticket-1", field: value}
    before = events(services)
    result = post(client, alice, "/v1/handoffs", body)
    assert result.status_code == 400
    assert result.json["error"] == {"code": "VALIDATION_ERROR", "message": f"{field} {reason}"}
    assert events(services) == before


def test_identity_stays_byte_exact_for_what_is_accepted(client, alice, bob):
    held = post(client, alice, "/v1/leases", ACQUIRE)
    assert held.status_code == 201
    # Another spelling that passes every rule is another resource: nothing is normalised.
    assert post(client, bob, "/v1/leases", {**ACQUIRE, "resource_id": "CAFÉ"}).status_code == 201
    assert post(client, bob, "/v1/leases", ACQUIRE).status_code == 409
    inner_space = {**ACQUIRE, "resource_id": " café "}  # not only whitespace: kept as sent
    assert post(client, bob, "/v1/leases", inner_space).status_code == 201


def test_the_published_pattern_refuses_what_javascript_can_see(client):
    """The pattern holds no surrogate (portable to ECMA-262 without the `u` flag) and already
    refuses the BMP's format characters and blank names; the rest is checked in code."""
    document = client.simulate_get("/openapi.json").json
    schema = document["paths"]["/v1/leases"]["post"]["requestBody"]["content"]["application/json"][
        "schema"
    ]
    pattern = schema["properties"]["resource_id"]["pattern"]
    assert not re.search(r"\\ud[89a-f]", pattern, re.IGNORECASE)
    for value in ("a\u200bb", "   ", "a\u2028b", "a\x85"):
        assert not re.fullmatch(pattern, value), value
    assert re.fullmatch(pattern, "café 🚀")
