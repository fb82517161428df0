"""Stores written by earlier releases keep working.

Each fixture holds leases, handoffs and keys in every state, a Lease snapshot, and the answers
that release gave: tests/fixtures/previous_release/ was written before the `titen` namespace (old
event topics such as `domain.lease:Lease.Acquired`), tests/fixtures/before_inline/ by the release
that still wrote the read models after each command's commit, tests/fixtures/two_lease_tables/
by the release that kept the unreleased leases in two read models. Today's code opens a copy of
each, on each backend, and must answer the same and go on serving it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import falcon.testing
import pytest

from tests.support import FakeClock, bearer
from titen.api.rest.app import create_app
from titen.domain.clock import parse_iso
from titen.domain.cursors import Cursors, unsealed_cursor
from titen.domain.lease import UNKEYED
from titen.service.bootstrap import Services, bootstrap
from titen.service.store_secret import UNKEYED_UUID5

CURSOR_FIELDS = ("cursor", "next_cursor")
UNSEALED = ("previous_release", "before_inline")
"""The releases before sealed cursors and keyed resource ids."""


class Upgraded:
    def __init__(self, release: str, services: Services, manifest: dict[str, Any]):
        self.release = release
        self.services = services
        self.manifest = manifest
        self.http = falcon.testing.TestClient(create_app(services))

    def key(self, organization: str, principal: str) -> str:
        return next(
            k["key"]
            for k in self.manifest["keys"]
            if (k["organization"], k["principal"]) == (organization, principal)
        )

    def lease(self, state: str, resource_id: str) -> dict[str, Any]:
        return next(
            lease
            for lease in self.manifest["leases"]
            if (lease["state"], lease["resource_id"]) == (state, resource_id)
        )

    def handoff(self, status: str, **fields: Any) -> dict[str, Any]:
        return next(
            h
            for h in self.manifest["handoffs"]
            if h["status"] == status and all(h[name] == value for name, value in fields.items())
        )

    def acquire(self, principal: str, resource_type: str, resource_id: str) -> Any:
        return self.http.simulate_post(
            "/v1/leases",
            headers=bearer(self.key("acme", principal)),
            json={
                "resource_type": resource_type,
                "resource_id": resource_id,
                "purpose": "after the upgrade",
                "ttl_seconds": 600,
            },
        )


@pytest.fixture
def upgraded(earlier_release: tuple[str, str, dict[str, Any]]) -> Iterator[Upgraded]:
    release, url, manifest = earlier_release
    clock = FakeClock(parse_iso(manifest["clock"]["final"]).astimezone(UTC))
    services = bootstrap(url, clock)
    try:
        yield Upgraded(release, services, manifest)
    finally:
        services.close()


def includes(now: Any, then: Any, cursors: Cursors) -> bool:
    """Whether today's answer says everything the old one said (fields may be added).

    Cursors are sealed since (docs/event-log.md): each must stand for the position the old one
    stood for, in its new form."""
    if isinstance(then, dict):
        return isinstance(now, dict) and all(
            name in now
            and (
                same_position(now[name], value, cursors)
                if name in CURSOR_FIELDS
                else includes(now[name], value, cursors)
            )
            for name, value in then.items()
        )
    if isinstance(then, list):
        return (
            isinstance(now, list)
            and len(now) == len(then)
            and all(includes(a, b, cursors) for a, b in zip(now, then, strict=True))
        )
    return now == then


def same_position(now: str, then: str, cursors: Cursors) -> bool:
    position = cursors.open(then)
    return (
        position is not None
        and cursors.open(now) == position
        and now != unsealed_cursor(position)  # today's are sealed, whatever the store's were
    )


def test_the_log_and_the_audit_read_as_the_previous_release_answered(upgraded: Upgraded):
    answers = upgraded.manifest["answers"]
    assert sum(len(paths) for paths in answers.values()) > 10
    for organization, paths in answers.items():
        for path, then in paths.items():
            # Every key read the whole log then; an operator's still does (an agent's: below).
            reader = "ops" if path.startswith("/v1/events") else then["as"]
            key = upgraded.key(organization, reader)
            now = upgraded.http.simulate_get(path, headers=bearer(key))
            assert now.status_code == then["status"], path
            answer = every_page(upgraded, path, key, now.json)
            assert includes(answer, then["body"], upgraded.services.cursors), path


def test_an_old_agent_key_reads_the_events_it_is_party_to(upgraded: Upgraded):
    narrowed = False
    for organization, paths in upgraded.manifest["answers"].items():
        then = paths["/v1/events?limit=500"]
        agent = then["as"]
        key = bearer(upgraded.key(organization, agent))
        now = upgraded.http.simulate_get("/v1/events?limit=500", headers=key).json["data"]
        party = [
            e["id"]
            for e in then["body"]["data"]["events"]
            if agent in (e["data"].get(f) for f in ("holder", "from_principal", "to_principal"))
        ]
        assert party
        narrowed |= len(party) < len(then["body"]["data"]["events"])
        assert [e["id"] for e in now["events"]] == party
    assert narrowed  # acme's agent_a read others' events then


def every_page(upgraded: Upgraded, path: str, key: str, answer: dict[str, Any]) -> dict[str, Any]:
    """A resource's audit with the terms of every page: those releases answered unpaged."""
    if not path.startswith("/v1/audit/leases?") or "data" not in answer:
        return answer
    data = answer["data"]
    terms = list(data["terms"])
    while data["next_cursor"]:
        page = upgraded.http.simulate_get(
            f"{path}&cursor={data['next_cursor']}", headers=bearer(key)
        )
        data = page.json["data"]
        terms.extend(data["terms"])
    return {"data": {**answer["data"], "terms": terms}}


def test_an_old_lease_still_conflicts_and_releases(upgraded: Upgraded):
    held = upgraded.lease("active", "checkout-service")
    assert held["organization"] == "acme"

    refused = upgraded.acquire("agent_b", "deploy", "checkout-service")
    assert refused.status_code == 409
    expiry = datetime.fromisoformat(held["expires_at"]).isoformat(timespec="milliseconds")
    assert refused.json["error"]["message"] == (
        f"Resource is leased by another principal until {expiry.replace('+00:00', 'Z')}."
    )

    released = upgraded.http.simulate_delete(
        f"/v1/leases/{held['lease_id']}", headers=bearer(upgraded.key("acme", "agent_a"))
    )
    assert released.status_code == 200
    assert upgraded.acquire("agent_b", "deploy", "checkout-service").status_code == 201


def test_old_terms_end_as_they_would_have(upgraded: Upgraded):
    superseded = upgraded.lease("superseded", "search-rebuild")
    gone = upgraded.http.simulate_delete(
        f"/v1/leases/{superseded['lease_id']}", headers=bearer(upgraded.key("acme", "agent_a"))
    )
    assert gone.status_code == 404

    expired = upgraded.lease("expired_unreleased", "weekly-digest")
    assert expired["holder"] == "agent_b"
    assert upgraded.acquire("agent_a", "report", "weekly-digest").status_code == 201

    # The resource whose history starts from a snapshot written by the old release.
    assert upgraded.acquire("agent_a", "queue", "orders-consumer").status_code == 201
    assert upgraded.acquire("agent_b", "queue", "orders-consumer").status_code == 409


def test_an_old_pending_handoff_resolves_once(upgraded: Upgraded):
    pending = upgraded.handoff("pending", organization="acme", to_principal="agent_reviewer")
    reviewer = bearer(upgraded.key("acme", "agent_reviewer"))
    inbox = upgraded.http.simulate_get("/v1/handoffs", headers=reviewer).json["data"]
    assert pending["handoff_id"] in [h["handoff_id"] for h in inbox["handoffs"]]

    path = f"/v1/handoffs/{pending['handoff_id']}/resolve"
    accepted = upgraded.http.simulate_post(path, headers=reviewer, json={"status": "accepted"})
    assert accepted.status_code == 200
    assert accepted.json["data"]["status"] == "accepted"
    again = upgraded.http.simulate_post(path, headers=reviewer, json={"status": "rejected"})
    assert again.status_code == 404

    resolved = upgraded.handoff("accepted", organization="acme")
    sender = bearer(upgraded.key("acme", resolved["from_principal"]))
    shown = upgraded.http.simulate_get(f"/v1/handoffs/{resolved['handoff_id']}", headers=sender)
    assert shown.json["data"]["status"] == "accepted"


def test_old_keys_authenticate_and_a_revoked_one_does_not(upgraded: Upgraded):
    for key in upgraded.manifest["keys"]:
        answer = upgraded.http.simulate_get("/v1/handoffs", headers=bearer(key["key"]))
        assert answer.status_code == (401 if key["revoked"] else 200), key["principal"]
        listed = upgraded.services.keys.list(key["organization"])
        roles = {row["principal"]: row["role"] for row in listed}
        assert roles[key["principal"]] == key["role"]


def test_every_read_model_equals_a_rebuild_and_the_published_events_stay_as_published(
    upgraded: Upgraded,
):
    """Right after the upgrade, each read model equals a rebuild from the log, the event log
    included: lease.acquired events the previous release published without `fencing_token`
    are rebuilt without it (a published event never changes), so a rebuild rewrites nothing."""
    projector = upgraded.services.projector
    for name in projector.projections:
        assert projector.verify(name) is None, name
    published = upgraded.services.event_log.rows()
    projector.rebuild("event_log")
    assert upgraded.services.event_log.rows() == published
    ops = bearer(upgraded.key("acme", "ops"))
    events = upgraded.http.simulate_get("/v1/events?limit=500", headers=ops).json["data"]
    acquired = [e["data"] for e in events["events"] if e["type"] == "lease.acquired"]
    with_tokens = upgraded.release != "previous_release"  # it predates fencing tokens
    assert acquired and all(("fencing_token" in data) == with_tokens for data in acquired)


def test_commands_after_the_upgrade_write_the_read_models_with_their_events(upgraded: Upgraded):
    services = upgraded.services
    assert upgraded.acquire("agent_a", "deploy", "after-upgrade").status_code == 201
    pending = upgraded.handoff("pending", organization="acme", to_principal="agent_reviewer")
    resolved = upgraded.http.simulate_post(
        f"/v1/handoffs/{pending['handoff_id']}/resolve",
        headers=bearer(upgraded.key("acme", "agent_reviewer")),
        json={"status": "rejected"},
    )
    assert resolved.status_code == 200
    end = services.app.recorder.max_notification_id()
    assert set(services.projector.positions().values()) == {end}
    for name in services.projector.projections:
        assert services.projector.verify(name) is None, name
    ops = bearer(upgraded.key("acme", "ops"))
    events = upgraded.http.simulate_get("/v1/events?limit=500", headers=ops).json["data"]
    newest = next(e for e in reversed(events["events"]) if e["type"] == "lease.acquired")
    assert newest["data"]["resource_id"] == "after-upgrade"
    assert newest["data"]["fencing_token"] >= 1  # recorded today: published with its token


def old_events(upgraded: Upgraded, organization: str = "acme") -> list[dict[str, Any]]:
    """The organization's events as the previous release served them, with its cursors."""
    return upgraded.manifest["answers"][organization]["/v1/events?limit=500"]["body"]["data"][
        "events"
    ]


def test_old_cursors_still_page_the_log_and_the_inbox(upgraded: Upgraded):
    ops = bearer(upgraded.key("acme", "ops"))
    then = old_events(upgraded)
    for index in (0, len(then) // 2, len(then) - 1):
        page = upgraded.http.simulate_get(
            "/v1/events", params={"after": then[index]["cursor"], "limit": 500}, headers=ops
        )
        assert page.status_code == 200
        assert [e["id"] for e in page.json["data"]["events"]] == [
            e["id"] for e in then[index + 1 :]
        ]

    reviewer = bearer(upgraded.key("acme", "agent_reviewer"))
    inbox = upgraded.http.simulate_get("/v1/handoffs", headers=reviewer).json["data"]["handoffs"]
    first = next(e for e in then if e["subject"] == inbox[0]["handoff_id"])
    after_first = upgraded.http.simulate_get(
        "/v1/handoffs", params={"cursor": first["cursor"]}, headers=reviewer
    )
    assert after_first.status_code == 200
    assert after_first.json["data"]["handoffs"] == inbox[1:]


def test_an_old_cursor_is_read_only_up_to_where_the_log_was_at_the_upgrade(upgraded: Upgraded):
    """Unsealed cursors beyond the old log's end were never handed out: taking them would let a
    client probe positions (other organizations' activity) as before."""
    if upgraded.release not in UNSEALED:
        pytest.skip("that release handed out sealed cursors only")
    ops = bearer(upgraded.key("acme", "ops"))
    end = upgraded.services.app.recorder.max_notification_id()
    assert upgraded.services.cursors.unsealed_until == end > 0
    for position, status in [(end, 200), (end + 1, 400)]:
        answer = upgraded.http.simulate_get(
            "/v1/events", params={"after": unsealed_cursor(position)}, headers=ops
        )
        assert answer.status_code == status, position
    assert upgraded.acquire("agent_a", "deploy", "after-upgrade").status_code == 201
    new = upgraded.http.simulate_get("/v1/events", params={"after": "latest"}, headers=ops)
    assert upgraded.services.cursors.open(new.json["data"]["next_cursor"]) == end + 2


def test_the_store_keeps_its_unkeyed_resource_ids_for_good(upgraded: Upgraded):
    """Every resource of an earlier store, old or first leased after the upgrade, is found
    under the uuid5 id earlier releases gave it, also after a restart."""
    if upgraded.release not in UNSEALED:
        pytest.skip("that release keyed its resource ids")
    services = upgraded.services
    held = upgraded.lease("active", "checkout-service")
    assert services.app.resource_keys == UNKEYED
    old = services.app.repository.get(UNKEYED.of("acme", "deploy", "checkout-service"))
    assert old.term.lease_id == held["lease_id"]

    assert upgraded.acquire("agent_a", "deploy", "after-upgrade").status_code == 201
    restarted = bootstrap(services.database.url, services.clock, pool_size=2)
    try:
        assert restarted.app.resource_keys == UNKEYED
        new = restarted.app.repository.get(UNKEYED.of("acme", "deploy", "after-upgrade"))
        assert new.term.holder == "agent_a"
        rows = restarted.store.query("SELECT resource_ids FROM {store_secret}")
        assert rows == [{"resource_ids": UNKEYED_UUID5}]
    finally:
        restarted.close()


def test_the_held_leases_are_listed_from_the_one_unreleased_lease_table(upgraded: Upgraded):
    """Releases that kept the listing in a read model of its own (or had none) leave a
    lease_index without positions: it is applied again from the log, and the listing's table
    is gone with its tracking record."""
    ops = bearer(upgraded.key("acme", "ops"))
    listed = upgraded.http.simulate_get("/v1/leases", headers=ops).json["data"]["leases"]
    held = [
        lease
        for lease in upgraded.manifest["leases"]
        if lease["organization"] == "acme" and lease["state"] in ("active", "expired_unreleased")
    ]
    assert sorted(lease["lease_id"] for lease in listed) == sorted(h["lease_id"] for h in held)
    store = upgraded.services.store
    tracked = store.query(f"SELECT application_name FROM {store.tracking_table}")
    assert "lease_listing" not in {row["application_name"] for row in tracked}
    with store.writing() as writer:
        assert writer.columns("lease_listing") == set()
        assert {"fencing_token", "position"} <= writer.columns("lease_index")
