"""Events stored in an older schema version are read correctly (see docs/events.md)."""

from __future__ import annotations

from datetime import timedelta

from eventsourcing.persistence import StoredEvent

from titen.domain.lease import Lease

ACQUIRED_TOPIC = "titen.domain.lease:Lease.Acquired"


def test_a_version_1_acquired_event_is_read_with_its_ttl_derived(services, clock):
    app = services.app
    now = clock.now()
    lease = Lease("acme", "deploy", "checkout")
    registered = app.mapper.to_stored_event(lease.collect_events()[0])
    # Version 1 of Lease.Acquired, as it was stored before `ttl_seconds` existed: the payload
    # has no `class_version` key (that means 1) and no `ttl_seconds`.
    version_1 = {
        "timestamp": now,
        "lease_id": "lease_" + "1" * 32,
        "organization": "acme",
        "resource_type": "deploy",
        "resource_id": "checkout",
        "holder": "agent_a",
        "purpose": "stored long ago",
        "acquired_at": now,
        "expires_at": now + timedelta(seconds=600),
    }
    acquired = StoredEvent(
        originator_id=lease.id,
        originator_version=2,
        topic=ACQUIRED_TOPIC,
        state=app.mapper.transcoder.encode(version_1),
    )
    app.recorder.insert_events([registered, acquired])

    event = next(e for e in app.events.get(lease.id) if isinstance(e, Lease.Acquired))
    assert event.ttl_seconds == 600
    assert event.expires_at == now + timedelta(seconds=600)

    loaded = app.repository.get(lease.id)
    assert loaded.term.lease_id == version_1["lease_id"]
    audited = services.auditor.lease("acme", version_1["lease_id"], None)
    assert (audited["ttl_seconds"], audited["purpose"]) == (600, "stored long ago")

    # Projections built from the old event agree with a rebuild, and the lease still works.
    services.projector.catch_up()
    assert services.lease_index.find(version_1["lease_id"]) is not None
    assert all(services.projector.verify(name) is None for name in services.projector.projections)
    clock.advance(1)
    services.app.release_lease(
        lease_key=lease.id, lease_id=version_1["lease_id"], by="agent_a", as_operator=False
    )


def test_new_acquired_events_are_stored_as_version_2(services):
    committed = services.app.acquire_lease(
        organization="acme",
        holder="agent_a",
        resource_type="deploy",
        resource_id="checkout",
        purpose="p",
        ttl_seconds=60,
    )
    stored = services.app.recorder.select_notifications(start=committed.position, limit=1)[0]
    assert stored.topic == ACQUIRED_TOPIC
    state = services.app.mapper.transcoder.decode(stored.state)
    assert (state["class_version"], state["ttl_seconds"]) == (2, 60)
