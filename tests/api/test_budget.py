"""The organization's request budget decides before the database is read (in-process, both
backends); served with `titen serve --org-rate`: tests/e2e/test_org_budget.py."""

from __future__ import annotations

import falcon.testing

from tests.support import bearer
from titen.api.rest.app import create_app
from titen.api.rest.budget import OrgBudget


def test_a_cached_key_over_its_budget_is_refused_without_reading_the_database(services, key):
    alice = key("acme", "agent_a")
    if services.keys.pushes_revocations:
        services.keys.set_listening(True)  # as a server's revocation listener tells it
    client = falcon.testing.TestClient(create_app(services, budget=OrgBudget(rate=0.01)))
    first = client.simulate_get("/v1/handoffs", headers=bearer(alice))
    services.store.datastore.close()  # from here on any read answers 503
    second = client.simulate_get("/v1/handoffs", headers=bearer(alice))
    assert first.status_code == 200
    assert second.status_code == 429, second.text
    assert second.json["error"]["code"] == "TOO_MANY_REQUESTS"
    assert second.headers["ratelimit-policy"] == '"org";q=1;w=2'
