"""A database error that reaches REST: an outage is 503 UNAVAILABLE, anything else a 500.

psycopg's own errors arrive unwrapped where titen talks to psycopg directly; they are matched by
storage/outages.py without REST naming psycopg (a process on SQLite never imports it)."""

from __future__ import annotations

import psycopg
import pytest

from tests.support import bearer
from titen.storage.outages import NotCommitted, OutcomeUnknown
from titen.storage.replication import NotReplicated

LEASE = {"resource_type": "deploy", "resource_id": "svc", "purpose": "p", "ttl_seconds": 60}


@pytest.mark.parametrize(
    ("raised", "status", "code"),
    [
        (psycopg.OperationalError("server closed the connection unexpectedly"), 503, "UNAVAILABLE"),
        (psycopg.InterfaceError("the connection is closed"), 503, "UNAVAILABLE"),
        (psycopg.ProgrammingError("syntax error at or near"), 500, "INTERNAL"),
        (RuntimeError("a defect"), 500, "INTERNAL"),
        (OutcomeUnknown("the commit's answer was lost"), 503, "OUTCOME_UNKNOWN"),
        (NotReplicated("no standby holds it"), 503, "OUTCOME_UNKNOWN"),
        (NotCommitted("the commit did not land"), 503, "UNAVAILABLE"),
    ],
    ids=["operational", "interface", "programming", "defect", "unknown", "unconfirmed", "lost"],
)
def test_an_unwrapped_driver_error_is_an_outage_only_when_it_is_one(
    client, services, alice, monkeypatch, raised, status, code
):
    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(services.app, "acquire_lease", fail)
    answer = client.simulate_post("/v1/leases", json=LEASE, headers=bearer(alice))
    assert answer.status_code == status, answer.text
    assert answer.json["error"]["code"] == code
    if status == 503:
        assert answer.headers["Retry-After"] == "2"
