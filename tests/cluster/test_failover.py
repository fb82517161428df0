"""Failover on PostgreSQL's own replication, under load: the primary crashes, the standby is
promoted, and real nodes given the multi-host URL carry on by themselves.

Two nodes serve four client threads that acquire, hand off and release; the primary is stopped
with `-m immediate` (a crash) and the synchronous standby promoted. Each node must then accept
a write within 15 s of the promotion, and at the end the history check (tests/cluster/history.py)
must pass on what the promoted standby holds: no acknowledged write lost (the standby had
flushed every acknowledged commit), tokens and positions continuing.
"""

from __future__ import annotations

import time

from tests.cluster.harness import Load, answer, lease, principals_and_keys, read_store
from tests.cluster.history import check
from tests.cluster.replication import replicated_pair
from tests.support import Server, eventually

RECOVERY_SECONDS = 15
CLIENTS = 4


def test_nodes_survive_a_primary_crash_and_promotion_with_no_acknowledged_write_lost():
    with replicated_pair(25600) as pair:
        url = pair.url()
        principals, keys, operator = principals_and_keys(url, CLIENTS)
        nodes = [Server(url, 8), Server(url, 8)]
        try:
            with Load([n.url for n in nodes], keys, principals, resources=3) as load:
                eventually(lambda: load.count() >= 30, "acknowledged writes before the crash", 60)
                pair.primary.crash()
                before = load.count()
                pair.standby.promote()
                promoted = time.monotonic()
                for index, node in enumerate(nodes):
                    probe = lease(f"probe{index}")

                    def writes(node=node, probe=probe) -> bool:
                        return answer(node.url, "POST", "/v1/leases", keys[0], probe)[0] == 201

                    eventually(writes, f"node {index} writes again", RECOVERY_SECONDS + 5)
                    recovered = time.monotonic() - promoted
                    print(f"node {index} wrote {recovered:.1f} s after the promotion")
                    assert recovered <= RECOVERY_SECONDS
                eventually(lambda: load.count() >= before + 30, "writes after the failover", 60)
            store = read_store(
                nodes[0].url,
                operator,
                [*load.resources, "probe0", "probe1"],
                pair.standby.url,
            )
            print(f"{len(load.acks.items)} acknowledged writes, {before} before the crash")
            check(load.acks.items, store)
        finally:
            for node in nodes:
                node.stop()
        for node in nodes:
            assert "Traceback" not in node.log, node.log
