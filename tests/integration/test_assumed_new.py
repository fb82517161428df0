"""An acquire of a resource this process has never seen saves without reading it first; when
the resource did exist (another process made it), the save's version check refuses and the
acquire runs again, loaded: the same answers as always."""

from __future__ import annotations

import pytest

from titen.domain.errors import LeaseHeld
from titen.service.bootstrap import bootstrap


def acquire(services, holder: str, resource_id: str = "r"):
    return services.app.acquire_lease(
        organization="acme",
        holder=holder,
        resource_type="deploy",
        resource_id=resource_id,
        purpose="p",
        ttl_seconds=60,
    ).value


def count_reads(services) -> list[int]:
    reads = [0]
    select = services.app.recorder.select_events

    def counted(*args, **kwargs):
        reads[0] += 1
        return select(*args, **kwargs)

    services.app.recorder.select_events = counted
    return reads


def test_a_new_resource_is_acquired_without_reading_the_store(services):
    reads = count_reads(services)
    assert acquire(services, "agent_a", "fresh").fencing_token == 1
    assert reads == [0]
    assert acquire(services, "agent_a", "fresh").fencing_token == 2  # known now: loaded
    assert reads[0] > 0


def test_a_resource_made_by_another_process_is_loaded_after_the_refused_save(database, clock):
    first = bootstrap(database, clock, pool_size=4)
    other = bootstrap(database, clock, pool_size=4)
    try:
        assert acquire(first, "agent_a").fencing_token == 1
        with pytest.raises(LeaseHeld):
            acquire(other, "agent_b")  # assumed new, refused by the store, loaded: held
        assert acquire(other, "agent_a").fencing_token == 2  # the holder renews, in order
        assert acquire(first, "agent_a").fencing_token == 3  # the first process's copy is stale
    finally:
        first.close()
        other.close()
