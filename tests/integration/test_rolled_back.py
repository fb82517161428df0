"""An exception raised by titen's own code inside a command's transaction rolls it back.

On PostgreSQL the library's insert, which titen once ran, caught every exception inside its
transaction block and raised it again only once the block had ended, which committed: a stored
answer refused as a duplicate (AlreadyAnswered), or any failure of the code that writes inside
the transaction, left the command's events committed while the command was answered as failed
(and a duplicate idempotent request then made a second lease under the first one's answer).
The transaction is titen's own now, its read models' rows sent with the COMMIT: a row the
database refuses must keep the COMMIT from landing too.
"""

from __future__ import annotations

from typing import Any

import pytest
from eventsourcing.application import AggregateNotFoundError

from titen.service.answers import AlreadyAnswered, Answer, Kept, Scope
from titen.service.bootstrap import Services

SCOPE = Scope("acme", "agent_alice", "POST", "/v1/leases", "k1")


def acquire(services: Services, resource: str, keep: Any) -> Any:
    return services.app.acquire_lease(
        organization="acme",
        holder="agent_alice",
        resource_type="deploy",
        resource_id=resource,
        purpose="p",
        ttl_seconds=60,
        keep=keep,
    )


def leased(services: Services, resource: str) -> bool:
    """Whether the log holds the resource's lease aggregate (any of its events)."""
    try:
        services.app.repository.get(services.app.resource_keys.of("acme", "deploy", resource))
    except AggregateNotFoundError:
        return False
    return True


def kept(_: object) -> Kept:
    return Kept(SCOPE, Answer("print", 201, "{}"))


def test_a_stored_answer_refused_as_a_duplicate_stores_no_event(services: Services):
    acquire(services, "first", kept)
    with pytest.raises(AlreadyAnswered):
        acquire(services, "second", kept)
    assert leased(services, "first")
    assert not leased(services, "second")


def test_any_failure_of_titens_code_in_the_transaction_stores_no_event(services: Services):
    class Broken(Exception):
        pass

    def broken_keep(cursor: Any, rows: Any) -> None:
        raise Broken("a defect in code that writes inside the transaction")

    services.app.recorder.keep = broken_keep  # type: ignore[attr-defined]
    with pytest.raises(Broken):
        acquire(services, "r", kept)
    assert not leased(services, "r")


def test_a_read_model_row_the_database_refuses_stores_no_event(services: Services):
    """On PostgreSQL the rows and the COMMIT go in one round trip: the refusal must skip it."""
    acquire(services, "first", None)
    last = services.app.recorder.max_notification_id()
    assert last is not None
    taken = [last + 1, last + 2]  # where the next acquire's events, and their log rows, go
    with services.store.writing() as writer:
        for position in taken:
            writer.execute("INSERT INTO {event_log} VALUES (%s, 'acme', 'x', 'x', 'x')", [position])
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        acquire(services, "second", None)
    assert not leased(services, "second")
    with services.store.writing() as writer:
        writer.execute("DELETE FROM {event_log} WHERE type = 'x'")
    acquire(services, "second", None)
    assert leased(services, "second")
