"""Events stored in an older schema version are read correctly (see docs/events.md)."""

from __future__ import annotations

from datetime import timedelta

from eventsourcing.persistence import StoredEvent

from titen.domain.lease import Lease

ACQUIRED_TOPIC = "titen.domain.lease:Lease.Acquired"
RESOURCE = ("acme", "deploy", "checkout")


def test_a_version_1_acquired_event_is_read_with_its_ttl_derived(services, clock):
    app = services.app
    now = clock.now()
    lease = Lease(app.resource_keys.of(*RESOURCE), *RESOURCE, timestamp=clock.now())
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
    services.projector.catch_up()  # as at startup: stored without its read models, long ago

    event = next(e for e in app.events.get(lease.id) if isinstance(e, Lease.Acquired))
    assert (event.ttl_seconds, event.fencing_token) == (600, 1)
    assert event.expires_at == now + timedelta(seconds=600)

    loaded = app.repository.get(lease.id)
    assert loaded.term.lease_id == version_1["lease_id"]
    audited = services.auditor.lease("acme", version_1["lease_id"], None)
    assert (audited["ttl_seconds"], audited["purpose"]) == (600, "stored long ago")

    # Projections built from the old event agree with a rebuild, and the lease still works.
    assert services.lease_index.find(version_1["lease_id"]) is not None
    assert all(services.projector.verify(name) is None for name in services.projector.projections)
    clock.advance(1)
    services.app.release_lease(
        lease_key=lease.id, lease_id=version_1["lease_id"], by="agent_a", as_operator=False
    )


def test_version_2_acquired_events_get_the_token_their_position_implies(services, clock):
    """Three terms stored as version 2 (no `fencing_token`): tokens 1, 2, 3, and then 4."""
    app = services.app
    lease = Lease(app.resource_keys.of(*RESOURCE), *RESOURCE, timestamp=clock.now())
    for n in range(3):
        holding = lease.acquire(
            lease_id=f"lease_{n:032d}",
            holder="agent_a",
            purpose="p",
            now=clock.now(),
            ttl_seconds=60,
        )
        if n == 1:
            lease.release(lease_id=holding.lease_id, by="ops", as_operator=True, now=clock.now())
    stored = [app.mapper.to_stored_event(event) for event in lease.collect_events()]
    app.recorder.insert_events([_as_version_2(app, event) for event in stored])

    tokens = [e.fencing_token for e in app.events.get(lease.id) if isinstance(e, Lease.Acquired)]
    assert tokens == [1, 2, 3]
    audited = services.auditor.resource("acme", "deploy", "checkout", None, limit=10)
    assert [term["fencing_token"] for term in audited.data["terms"]] == [1, 2, 3]
    clock.advance(60)
    assert acquire(services, "agent_b").value.fencing_token == 4  # replaced after expiry


def test_new_acquired_events_are_stored_as_version_3_with_their_token(services):
    committed = acquire(services, "agent_a")
    stored = services.app.recorder.select_notifications(start=committed.position, limit=1)[0]
    assert stored.topic == ACQUIRED_TOPIC
    state = services.app.mapper.transcoder.decode(stored.state)
    assert (state["class_version"], state["ttl_seconds"], state["fencing_token"]) == (3, 60, 1)


def acquire(services, holder: str):
    return services.app.acquire_lease(
        organization="acme",
        holder=holder,
        resource_type="deploy",
        resource_id="checkout",
        purpose="p",
        ttl_seconds=60,
    )


def _as_version_2(app, stored: StoredEvent) -> StoredEvent:
    """An Acquired event as releases before fencing tokens stored it; other events as they are."""
    if stored.topic != ACQUIRED_TOPIC:
        return stored
    state = app.mapper.transcoder.decode(stored.state)
    del state["fencing_token"]
    state["class_version"] = 2
    return StoredEvent(
        originator_id=stored.originator_id,
        originator_version=stored.originator_version,
        topic=stored.topic,
        state=app.mapper.transcoder.encode(state),
    )
