"""What one organization can learn of another: nothing from ids, cursors or lookup paths.

Resource ids of a new store are keyed with the store's secret, cursors are sealed with it, and a
lookup by a caller's id reads nothing of another organization's events (docs/security.md).
Stores of earlier releases are covered in tests/integration/test_previous_release.py.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID

import pytest
from eventsourcing.application import AggregateNotFoundError

from tests.support import bearer
from titen.domain.cursors import unsealed_cursor
from titen.domain.errors import LeaseHeld
from titen.domain.lease import UNKEYED
from titen.service.bootstrap import bootstrap
from titen.service.store_secret import KEYED

ACQUIRE = {"resource_type": "deploy", "resource_id": "x", "purpose": "p", "ttl_seconds": 60}
NOT_VALID = "is not valid: pass next_cursor from the previous page."


@pytest.fixture
def outsider(key):
    return key("umbra", "agent_outsider")


def test_a_new_stores_resource_ids_cannot_be_computed_from_their_names(services, client, alice):
    acquired = client.simulate_post("/v1/leases", json=ACQUIRE, headers=bearer(alice))
    assert acquired.status_code == 201
    with pytest.raises(AggregateNotFoundError):
        services.app.repository.get(UNKEYED.of("acme", "deploy", "x"))
    keyed = services.app.resource_keys.of("acme", "deploy", "x")
    assert services.app.repository.get(keyed).term.holder == "agent_alice"
    rows = services.store.query("SELECT resource_ids FROM {store_secret}")
    assert rows == [{"resource_ids": KEYED}]


def test_every_process_of_a_store_reads_the_same_secret(services, client, clock, alice):
    """Another process (or this one restarted) finds the same resources and opens the cursors
    this one handed out."""
    client.simulate_post("/v1/leases", json=ACQUIRE, headers=bearer(alice))
    cursor = client.simulate_get("/v1/events", headers=bearer(alice)).json["data"]["next_cursor"]
    other = bootstrap(services.database.url, clock, pool_size=2)
    try:
        assert other.app.resource_keys == services.app.resource_keys
        assert other.cursors.open(cursor) == services.app.recorder.max_notification_id()
        with pytest.raises(LeaseHeld):  # the same aggregate: no second holder
            other.app.acquire_lease(
                organization="acme",
                holder="agent_bob",
                resource_type="deploy",
                resource_id="x",
                purpose="p",
                ttl_seconds=60,
            )
    finally:
        other.close()


def test_processes_opening_a_new_store_together_make_one_secret(database):
    opened, failed = [], []

    def start() -> None:
        try:
            opened.append(bootstrap(database, pool_size=2))
        except Exception as error:  # reported below
            failed.append(error)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert failed == []
        assert len({services.app.resource_keys for services in opened}) == 1
        assert len({services.cursors.seal_event(7) for services in opened}) == 1
    finally:
        for services in opened:
            services.close()


@contextmanager
def aggregates_read(services) -> Iterator[set[UUID]]:
    """The ids of the aggregates whose events or snapshots are read meanwhile."""
    read: set[UUID] = set()
    recorders = {id(r): r for r in (services.app.events.recorder, services.app.snapshots.recorder)}
    originals = {}
    for recorder in recorders.values():
        original = recorder.select_events
        originals[id(recorder)] = original

        def recording(originator_id, *args, _original=original, **kwargs):
            read.add(UUID(str(originator_id)))
            return _original(originator_id, *args, **kwargs)

        recorder.select_events = recording
    try:
        yield read
    finally:
        for key, recorder in recorders.items():
            recorder.select_events = originals[key]


def test_a_lookup_by_handoff_id_reads_nothing_of_another_organizations_aggregates(
    services, client, alice, outsider, key
):
    """An id that is another organization's aggregate (a lease's: computable in stores of
    earlier releases; a handoff's) is missing without a single event of it being read."""
    client.simulate_post("/v1/leases", json=ACQUIRE, headers=bearer(alice))
    lease_key = services.app.resource_keys.of("acme", "deploy", "x")
    key("acme", "agent_bob")
    handoff = client.simulate_post(
        "/v1/handoffs",
        json={"to_principal": "agent_bob", "subject_id": "s"},
        headers=bearer(alice),
    ).json["data"]["handoff_id"]
    ops = key("umbra", "ops", role="operator")
    for target in ("hoff_" + lease_key.hex, handoff):
        with aggregates_read(services) as read:
            shown = client.simulate_get(f"/v1/handoffs/{target}", headers=bearer(outsider))
            resolved = client.simulate_post(
                f"/v1/handoffs/{target}/resolve",
                json={"status": "accepted"},
                headers=bearer(outsider),
            )
            audited = client.simulate_get(f"/v1/audit/handoffs/{target}", headers=bearer(ops))
        assert [shown.status_code, resolved.status_code, audited.status_code] == [404] * 3
        assert read == set(), target


def test_a_lookup_by_lease_id_reads_nothing_of_another_organizations_aggregates(
    services, client, alice, outsider, key
):
    lease_id = client.simulate_post("/v1/leases", json=ACQUIRE, headers=bearer(alice)).json["data"][
        "lease_id"
    ]
    ops = key("umbra", "ops", role="operator")
    with aggregates_read(services) as read:
        shown = client.simulate_get(f"/v1/leases/{lease_id}", headers=bearer(outsider))
        released = client.simulate_delete(f"/v1/leases/{lease_id}", headers=bearer(ops))
        audited = client.simulate_get(f"/v1/audit/leases/{lease_id}", headers=bearer(ops))
        resource = client.simulate_get(
            "/v1/audit/leases",
            params={"resource_type": "deploy", "resource_id": "x"},
            headers=bearer(ops),
        )
    assert [shown.status_code, released.status_code, audited.status_code] == [404] * 3
    assert resource.json["data"]["terms"] == []  # umbra's own resource of that name
    assert services.app.resource_keys.of("acme", "deploy", "x") not in read
    assert read <= {services.app.resource_keys.of("umbra", "deploy", "x")}


def test_cursors_are_sealed_and_a_forged_one_is_a_400_everywhere(services, client, alice):
    client.simulate_post("/v1/leases", json=ACQUIRE, headers=bearer(alice))
    event = client.simulate_get("/v1/events", headers=bearer(alice)).json["data"]["events"][0]
    position = services.app.recorder.max_notification_id()
    raw = base64.urlsafe_b64decode(event["cursor"] + "=" * (-len(event["cursor"]) % 4))
    assert position.to_bytes(8, "big") not in raw and b"after" not in raw
    assert event["cursor"] != unsealed_cursor(position)

    created = client.simulate_post(
        "/v1/webhooks", json={"url": "http://93.184.216.34/"}, headers=bearer(alice)
    )
    webhook_id = created.json["data"]["webhook_id"]
    # A new store handed out no unsealed cursor: only the start is one (it tells nothing).
    for forged in (unsealed_cursor(position), event["cursor"][:-2] + "AA"):
        for path, name in [
            ("/v1/handoffs", "cursor"),
            ("/v1/events", "after"),
            ("/v1/events/stream", "after"),
            ("/v1/webhooks", "cursor"),
            (f"/v1/webhooks/{webhook_id}/deliveries", "cursor"),
        ]:
            answer = client.simulate_get(path, params={name: forged}, headers=bearer(alice))
            assert answer.status_code == 400, (path, forged)
            assert answer.json["error"] == {
                "code": "VALIDATION_ERROR",
                "message": f"{name} {NOT_VALID}",
            }
        streamed = client.simulate_get(
            "/v1/events/stream", headers={**bearer(alice), "Last-Event-ID": forged}
        )
        assert streamed.status_code == 400
        assert streamed.json["error"]["message"] == f"after {NOT_VALID}"
    start = client.simulate_get(
        "/v1/events", params={"after": unsealed_cursor(0)}, headers=bearer(alice)
    )
    assert start.json["data"]["events"] == [event]
