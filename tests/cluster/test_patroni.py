"""Failover under Patroni, as operators run it: strict synchronous mode, two titen nodes on the
multi-host URL, four clients, and a fault each: a planned switchover, a crash of the leader's
node (Patroni and postmaster killed together), a crash of the synchronous standby's node.

After each, every answer is checked against the store with the history checker
(tests/cluster/history.py): no acknowledged write lost, no duplicate; no 500 and no traceback;
no word from the webhook workers (there is no webhook); both nodes write again by themselves.
The times printed are what docs/deployment.md reports.
These tests are marked `patroni`: `make test` leaves them out, `make test-patroni` runs them
(.ci/run, after the rest).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.cluster.conftest import cannot_run
from tests.cluster.harness import Load, answer, lease, principals_and_keys, read_store
from tests.cluster.history import check
from tests.cluster.patroni import LEADS, PatroniPair, patroni_pair, why_not
from tests.support import Server, eventually

pytestmark = pytest.mark.patroni
CLIENTS = 4
REQUEST_SECONDS = 10.0
"""docs/operations.md: every answer within this, whatever the database does."""
SETTLED_SECONDS = 120
"""A bound for the cluster to be whole again after a fault (on 2 busy cores), not a pace."""


@pytest.fixture(autouse=True)
def patroni_tools() -> None:
    cannot_run(why_not())


def under_load(port: int, fault: Callable[[PatroniPair, list[Server], str], None]) -> None:
    """Two nodes under load on a fresh Patroni pair; `fault(pair, nodes, key)` returns once the
    pair is whole again; then the load must go on and the history check pass."""
    with patroni_pair(port) as pair:
        url = pair.url()
        principals, keys, operator = principals_and_keys(url, CLIENTS)
        nodes = [Server(url, 8), Server(url, 8)]
        try:
            with Load([n.url for n in nodes], keys, principals, resources=3) as load:
                eventually(lambda: load.count() >= 30, "acknowledged writes before the fault", 60)
                fault(pair, nodes, keys[0])
                before = load.count()
                eventually(lambda: load.count() >= before + 30, "writes after the fault", 60)
            store = read_store(nodes[0].url, operator, load.resources, pair.leader().url)
            print(f"{load.count()} acknowledged writes; answers {dict(load.statuses)}")
            check(load.acks.items, store)
            assert load.statuses[500] == 0, load.statuses
        finally:
            for node in nodes:
                node.stop()
        for node in nodes:
            assert "Traceback" not in node.log, node.log
            assert "webhook delivery failed" not in node.log  # no webhook: nothing to say


def writes_again(nodes: list[Server], key: str, since: float, what: str) -> None:
    """Each node accepts a write; prints how long after `since` (monotonic) it did."""
    for index, node in enumerate(nodes):
        probe = lease(f"probe-{what}-{index}")
        eventually(
            lambda node=node, probe=probe: (
                answer(node.url, "POST", "/v1/leases", key, probe)[0] == 201
            ),
            f"node {index} writes again",
            SETTLED_SECONDS,
        )
        print(f"{what}: node {index} wrote {time.monotonic() - since:.2f} s after")


def test_a_planned_switchover_loses_no_acknowledged_write():
    def switchover(pair: PatroniPair, nodes: list[Server], key: str) -> None:
        old = pair.leader()
        began = time.monotonic()
        pair.switchover()
        eventually(lambda: pair.other(old).role() in LEADS, "the standby leads", SETTLED_SECONDS)
        print(f"switchover: the standby led {time.monotonic() - began:.2f} s after it was asked")
        writes_again(nodes, key, began, "switchover")
        pair.wait_healthy(SETTLED_SECONDS)

    under_load(25620, switchover)


def test_a_crash_of_the_leaders_node_loses_no_acknowledged_write():
    def crash_leader(pair: PatroniPair, nodes: list[Server], key: str) -> None:
        leader = pair.leader()
        survivor = pair.other(leader)
        leader.crash()
        crashed = time.monotonic()
        eventually(lambda: survivor.role() in LEADS, "the survivor is promoted", SETTLED_SECONDS)
        promoted = time.monotonic()
        print(f"leader crash: the survivor was promoted {promoted - crashed:.2f} s after")
        # Only now (it could otherwise take the leader key back); in strict synchronous mode
        # no write commits until it is back as the synchronous standby.
        leader.start()
        writes_again(nodes, key, promoted, "leader crash (since the promotion)")
        pair.wait_healthy(SETTLED_SECONDS)
        print(f"leader crash: whole again {time.monotonic() - crashed:.2f} s after")

    under_load(25625, crash_leader)


def test_a_crash_of_the_standbys_node_blocks_writes_within_the_bound_then_they_resume():
    def crash_standby(pair: PatroniPair, nodes: list[Server], key: str) -> None:
        standby = pair.sync_standby()
        standby.crash()
        crashed = time.monotonic()
        began = time.monotonic()
        status, headers, body = answer(nodes[0].url, "POST", "/v1/leases", key, lease("blocked"))
        took = time.monotonic() - began
        print(f"standby crash: a write answered {status} after {took:.2f} s")
        assert status == 503 and "retry-after" in headers, body
        assert took < REQUEST_SECONDS, took
        eventually(
            lambda: any(
                "writes are blocked" in problem
                for problem in answer(nodes[1].url, "GET", "/readyz", key)[2]["data"]["problems"]
            ),
            "/readyz says writes are blocked",
            REQUEST_SECONDS,
        )
        standby.start()
        pair.wait_healthy(SETTLED_SECONDS)
        print(f"standby crash: whole again {time.monotonic() - crashed:.2f} s after")
        writes_again(nodes, key, crashed, "standby crash (since the crash)")

    under_load(25630, crash_standby)
