"""A paused node (SIGSTOP: a long GC pause, a stopped VM) holding a lease: while it sleeps the
lease expires and another principal takes the resource with a higher fencing token; the paused
node's release, sent before it stopped answering and served after SIGCONT, is refused.
"""

from __future__ import annotations

import os
import signal
import threading

from tests.cluster.harness import answer, lease, principals_and_keys, read_store
from tests.cluster.history import Ack, check
from tests.support import Server, eventually

TTL = 10  # the shortest a lease may be


def test_a_paused_holders_lease_passes_on_and_its_late_release_is_refused(postgres_database):
    _, (alice, bob), operator = principals_and_keys(postgres_database, 2)
    paused = Server(postgres_database, 4, own_group=True)
    other = Server(postgres_database, 4)
    try:
        status, _, body = answer(paused.url, "POST", "/v1/leases", alice, lease("job", TTL))
        assert status == 201 and body["data"]["fencing_token"] == 1, body
        first = body["data"]["lease_id"]
        acks = [Ack("acquire", first, 1)]

        os.killpg(paused.process.pid, signal.SIGSTOP)
        late: list = []
        threading.Thread(  # accepted by the kernel, served only after SIGCONT
            target=lambda: late.append(answer(paused.url, "DELETE", f"/v1/leases/{first}", alice)),
            daemon=True,
        ).start()
        taken: list = []

        def bob_takes_it() -> bool:
            taken[:] = [answer(other.url, "POST", "/v1/leases", bob, lease("job", TTL))]
            return taken[0][0] == 201

        eventually(bob_takes_it, "the lease expires and bob takes it", 3 * TTL)
        assert taken[0][2]["data"]["fencing_token"] == 2, taken
        acks.append(Ack("acquire", taken[0][2]["data"]["lease_id"], 2))
        assert late == []  # still paused

        os.killpg(paused.process.pid, signal.SIGCONT)
        eventually(lambda: late, "the paused node answers the late release", 30)
        status, _, body = late[0]
        assert status == 404, body
        check(acks, read_store(other.url, operator, ["job"], postgres_database))
    finally:
        os.killpg(paused.process.pid, signal.SIGCONT)
        paused.stop()
        other.stop()
