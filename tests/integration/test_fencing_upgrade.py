"""A store written before fencing tokens: every term gets the token its history implies.

The fixture (tests/fixtures/previous_release) was written by the release before the `titen`
namespace, whose `Lease.Acquired` events are version 2 (no `fencing_token`) and whose Lease
snapshot (queue/orders-consumer, 61 acquires, snapshot at version 100) holds a Term without one.
Each resource's terms, as the manifest's recorded audit answers list them, must be numbered
1..N now, and the next acquire of each must get N + 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import falcon.testing
import pytest

from tests.support import FakeClock, bearer
from titen.api.rest.app import create_app
from titen.domain.clock import parse_iso
from titen.domain.lease import UNKEYED
from titen.service.bootstrap import Services, bootstrap

AUDIT = "/v1/audit/leases?"
UNRELEASED = {"active": False, "expired_unreleased": True}  # state → expired at the final time


@pytest.fixture
def upgraded(previous_release) -> Iterator[tuple[Services, falcon.testing.TestClient, dict]]:
    url, manifest = previous_release
    services = bootstrap(url, FakeClock(parse_iso(manifest["clock"]["final"])))
    yield services, falcon.testing.TestClient(create_app(services)), manifest
    services.close()


def keys(manifest: dict) -> dict[tuple[str, str], str]:
    return {(k["organization"], k["principal"]): k["key"] for k in manifest["keys"]}


def recorded_audits(manifest: dict) -> Iterator[tuple[str, str, list[dict]]]:
    """(organization, audit path, the terms the previous release answered) per resource."""
    for organization, answers in manifest["answers"].items():
        for path, answer in answers.items():
            if path.startswith(AUDIT):
                yield organization, path, answer["body"]["data"]["terms"]


def implied_tokens(manifest: dict) -> dict[str, int]:
    """Each recorded lease's token: its place among its resource's terms, counting from 1."""
    return {
        term["lease_id"]: n
        for _, _, terms in recorded_audits(manifest)
        for n, term in enumerate(terms, 1)
    }


def audited_terms(client, key: str, path: str) -> list[dict]:
    result = client.simulate_get(f"{path}&limit=500", headers=bearer(key))
    assert result.status_code == 200, result.json
    assert result.json["data"]["next_cursor"] is None
    return result.json["data"]["terms"]


def test_old_terms_are_numbered_one_to_n_in_the_order_they_began(upgraded):
    _, client, manifest = upgraded
    audits = list(recorded_audits(manifest))
    assert max(len(terms) for _, _, terms in audits) == 61  # the snapshotted resource
    for organization, path, recorded in audits:
        now = audited_terms(client, keys(manifest)[(organization, "ops")], path)
        assert now == [{**term, "fencing_token": n} for n, term in enumerate(recorded, 1)]


def test_an_unreleased_old_lease_shows_its_token_to_its_holder(upgraded):
    _, client, manifest = upgraded
    tokens = implied_tokens(manifest)
    unreleased = [lease for lease in manifest["leases"] if lease["state"] in UNRELEASED]
    assert {lease["resource_id"] for lease in unreleased} >= {"orders-consumer"}
    for lease in unreleased:
        holder = keys(manifest)[(lease["organization"], lease["holder"])]
        result = client.simulate_get(f"/v1/leases/{lease['lease_id']}", headers=bearer(holder))
        assert result.status_code == 200, (lease, result.json)
        data = result.json["data"]
        assert (data["fencing_token"], data["expired"]) == (
            tokens[lease["lease_id"]],
            UNRELEASED[lease["state"]],
        )
        assert (data["expires_at"], data["holder"]) == (lease["expires_at"], lease["holder"])


def test_the_next_acquire_of_each_resource_continues_from_its_history(upgraded):
    services, client, manifest = upgraded
    queue = UNKEYED.of("acme", "queue", "orders-consumer")  # an earlier store keeps uuid5
    assert [s.originator_version for s in services.app.snapshots.get(queue)] == [100]
    services.clock.advance(timedelta(days=2).total_seconds())  # every old lease has expired
    for organization, path, recorded in recorded_audits(manifest):
        query = dict(part.split("=") for part in path.removeprefix(AUDIT).split("&"))
        body = {**query, "purpose": "after the upgrade", "ttl_seconds": 60}
        agent = keys(manifest)[(organization, "agent_a")]
        result = client.simulate_post("/v1/leases", json=body, headers=bearer(agent))
        assert (result.status_code, result.json["data"]["fencing_token"]) == (
            201,
            len(recorded) + 1,
        ), path
        tokens = [
            t["fencing_token"]
            for t in audited_terms(client, keys(manifest)[(organization, "ops")], path)
        ]
        assert tokens == list(range(1, len(recorded) + 2))


def test_published_old_acquires_stay_as_published_through_a_rebuild(upgraded):
    """Rows the previous release published lack `fencing_token`, and keep lacking it: a
    published event never changes, so the event log equals a rebuild as it is (verify passes
    before anything is done) and a rebuild serves the very events, ids, positions and data the
    previous release served. (Cursors are served sealed since then: each names the same
    position.) The leases themselves show their tokens (the tests above)."""
    services, client, manifest = upgraded
    cursors = services.cursors

    def resealed(cursor: str) -> str:
        return cursors.seal_event(cursors.open(cursor))

    assert services.projector.verify("event_log") is None
    services.projector.rebuild("event_log")
    assert services.projector.verify("event_log") is None
    for organization, answers in manifest["answers"].items():
        recorded = answers["/v1/events?limit=500"]
        # Every key read the whole log then; an operator's still does.
        operator = keys(manifest)[(organization, "ops")]
        result = client.simulate_get("/v1/events?limit=500", headers=bearer(operator))
        expected = recorded["body"]
        assert any(e["type"] == "lease.acquired" for e in expected["data"]["events"])
        for event in expected["data"]["events"]:
            event["cursor"] = resealed(event["cursor"])
        expected["data"]["next_cursor"] = resealed(expected["data"]["next_cursor"])
        assert result.json == expected
