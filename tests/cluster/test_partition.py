"""A network partition between one node's host (a namespace) and its database: the node
answers 503 UNAVAILABLE with Retry-After, `/readyz` turns 503 within 10 s while `/healthz`
stays 200, it recovers by itself within 10 s of the heal, and an Idempotency-Key retried across
the cut makes exactly one lease. The history check ends it.
"""

from __future__ import annotations

import time

from tests.cluster import hosts
from tests.cluster.conftest import cannot_run
from tests.cluster.harness import answer, lease, principals_and_keys, read_store
from tests.cluster.history import Ack, check
from tests.cluster.replication import single_cluster
from tests.support import Server, eventually

PORT = 25620
BOUND = 10  # seconds: the bound for /readyz to turn and for recovery after the heal


def test_a_partitioned_node_answers_503_recovers_after_the_heal_and_makes_one_lease():
    cannot_run(hosts.why_not())
    with (
        hosts.namespaced_host(20) as host,
        single_cluster(PORT, f"127.0.0.1,{host.gateway}", f"{host.address}/32") as db,
    ):
        _, (key,), operator = principals_and_keys(db.url, 1)
        node = Server(f"postgresql://postgres@{host.gateway}:{PORT}/test", 4,
                      host=host.address, prefix=host.prefix)  # fmt: skip
        try:
            status, _, body = answer(node.url, "POST", "/v1/leases", key, lease("before"))
            assert status == 201, body
            acks = [Ack("acquire", body["data"]["lease_id"], body["data"]["fencing_token"])]

            host.partition(PORT)
            cut = time.monotonic()
            eventually(
                lambda: answer(node.url, "GET", "/readyz", key)[0] == 503, "/readyz 503", BOUND
            )
            print(f"/readyz 503 after {time.monotonic() - cut:.1f} s")
            once = {"Idempotency-Key": "across-the-cut"}
            sent = time.monotonic()
            status, headers, body = answer(node.url, "POST", "/v1/leases", key, lease("cut"), once)
            print(f"503 after {time.monotonic() - sent:.1f} s")
            assert status == 503 and body["error"]["code"] == "UNAVAILABLE", body
            assert "retry-after" in headers
            assert answer(node.url, "GET", "/healthz", key)[0] == 200

            host.heal()
            healed = time.monotonic()
            answers: list = []

            def retried() -> bool:
                answers.append(answer(node.url, "POST", "/v1/leases", key, lease("cut"), once))
                return answers[-1][0] == 201

            eventually(retried, "the retried acquire succeeds after the heal", BOUND)
            print(f"recovered {time.monotonic() - healed:.1f} s after the heal")
            assert {a[0] for a in answers} <= {201, 503}, answers
            data = answers[-1][2]["data"]
            acks.append(Ack("acquire", data["lease_id"], data["fencing_token"]))
            store = read_store(node.url, operator, ["before", "cut"], db.url)
            check(acks, store)
            assert len(store.terms["cut"]) == 1
        finally:
            node.stop()
        assert "Traceback" not in node.log, node.log
