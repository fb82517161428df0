"""What runs after a command's commit cannot turn it into a failed command.

The commit listeners only wake readers (event streams, webhook workers); one of them reads the
database (whether any webhook is enabled) while its cache cannot be trusted, which is exactly
when the database is failing. Its failure became the command's: a 503 for a handoff that was
created (found by tests/e2e/test_fault_soak.py).
"""

from __future__ import annotations

import logging
from uuid import UUID

import psycopg
import pytest

from titen.domain.lease import Holding
from titen.service.application import Committed
from titen.service.bootstrap import Services


def acquire_r(services: Services) -> Committed[Holding]:
    """agent_alice acquires acme's deploy "r"."""
    return services.app.acquire_lease(
        organization="acme",
        holder="agent_alice",
        resource_type="deploy",
        resource_id="r",
        purpose="p",
        ttl_seconds=60,
    )


def key_of_r(services: Services) -> UUID:
    """The lease key of acme's deploy "r"."""
    return services.app.resource_keys.of("acme", "deploy", "r")


@pytest.mark.parametrize(
    "failure",
    [psycopg.OperationalError("the database went away"), RuntimeError("a defect")],
    ids=["outage", "defect"],
)
def test_a_failing_commit_listener_leaves_the_command_done(
    services: Services, failure: Exception, caplog: pytest.LogCaptureFixture
):
    def listener(position: int, organizations: frozenset[str]) -> None:
        raise failure

    services.app.on_commit.append(listener)
    committed = acquire_r(services)
    holding = services.app.lease_holding(
        lease_key=key_of_r(services),
        lease_id=committed.value.lease_id,
        by="agent_alice",
        as_operator=False,
    )
    assert holding.lease_id == committed.value.lease_id
    [record] = [r for r in caplog.records if "commit listener" in r.getMessage()]
    assert record.levelno == (logging.WARNING if "went away" in str(failure) else logging.ERROR)


def test_commit_listeners_learn_the_organizations_whose_event_logs_grew(services: Services):
    told: list[tuple[int, frozenset[str]]] = []
    services.app.on_commit.append(
        lambda position, organizations: told.append((position, organizations))
    )
    acquired = acquire_r(services)
    services.app.release_lease(
        lease_key=key_of_r(services),
        lease_id=acquired.value.lease_id,
        by="agent_alice",
        as_operator=False,
    )
    (acquire_position, acquire_organizations), (release_position, released) = told
    assert acquire_organizations == {"acme"}
    assert released == frozenset()  # a release is not published to the event log
    assert release_position > acquire_position
