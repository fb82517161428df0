"""The synchronous-replication trap: a commit whose wait for the standby ends early is on the
primary alone, and must never be answered as done.

The standby is stopped, so every commit waits for it. First the waiting commit is cancelled
(`pg_cancel_backend`): PostgreSQL returns success with only a WARNING. Then one is left to wait
until the node's answer deadline: the node settles it by terminating its session, which commits
it locally with the same WARNING, and finds it. Both must answer 503 OUTCOME_UNKNOWN with
Retry-After, saying the outcome is unknown; once the standby is back, the same Idempotency-Key
returns the original outcome, and the history check passes. A retry with that key while the
standby is still down is the same unknown, never a 201 the standby does not hold yet. With
several writers queued behind the waiting commit, each is answered within the request's 10 s.
"""

from __future__ import annotations

import threading
import time

from tests.cluster.harness import answer, lease, principals_and_keys, read_store
from tests.cluster.history import Ack, check
from tests.cluster.replication import Pair, replicated_pair, wait_for
from tests.support import Server, eventually

WAITING = "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'"


def acquire_in_thread(node: Server, key: str, resource: str, once: str) -> list:
    """POST an acquire in a thread; the list gets (status, headers, body) when it answers."""
    result: list = []

    def send() -> None:
        result.append(answer(node.url, "POST", "/v1/leases", key, lease(resource), once))

    threading.Thread(target=send, daemon=True).start()
    return result


def waiting_commit(pair: Pair) -> int:
    """The server process of a commit waiting for the standby, once there is one."""
    found: list[int] = []
    wait_for(lambda: found.append(pair.primary.scalar(WAITING)) or found[-1], "a waiting commit")
    return found[-1]


def assert_unknown(result: list) -> None:
    eventually(lambda: result, "the node answers", 30)
    status, headers, body = result[0]
    assert status == 503, body
    assert body["error"]["code"] == "OUTCOME_UNKNOWN", body
    assert "retry-after" in headers
    message = body["error"]["message"]
    assert "outcome is unknown" in message and "Idempotency-Key" in message, message


def test_a_commit_the_standby_never_confirmed_is_never_acknowledged():
    with replicated_pair(25610) as pair:
        url = pair.url()
        _, (key,), operator = principals_and_keys(url, 1)
        node = Server(url, 4)
        try:
            status, _, body = answer(node.url, "POST", "/v1/leases", key, lease("before"))
            assert status == 201
            acks = [Ack("acquire", body["data"]["lease_id"], body["data"]["fencing_token"])]
            pair.standby.ctl("stop")

            cancelled = {"Idempotency-Key": "cancelled"}
            result = acquire_in_thread(node, key, "cancelled", cancelled)
            pair.primary.scalar(f"SELECT pg_cancel_backend({waiting_commit(pair)})")
            assert_unknown(result)

            settled = {"Idempotency-Key": "settled"}
            result = acquire_in_thread(node, key, "settled", settled)
            waiting_commit(pair)  # left waiting: the node's answer deadline ends it
            assert_unknown(result)
            for resource, once in (("cancelled", cancelled), ("settled", settled)):
                # Still on the primary alone: still unknown, not a 201 a failover would lose.
                retried = answer(node.url, "POST", "/v1/leases", key, lease(resource), once)
                assert_unknown([retried])

            pair.standby.ctl("start")
            wait_for(
                lambda: (
                    pair.primary.scalar(
                        "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'"
                    )
                    == "sync"
                ),
                "the standby is back",
            )
            for resource, once in (("cancelled", cancelled), ("settled", settled)):
                status, _, body = answer(node.url, "POST", "/v1/leases", key, lease(resource), once)
                assert status == 201, body
                acks.append(Ack("acquire", body["data"]["lease_id"], body["data"]["fencing_token"]))
            store = read_store(
                node.url, operator, ["before", "cancelled", "settled"], pair.primary.url
            )
            check(acks, store)
            assert [len(store.terms[r]) for r in ("cancelled", "settled")] == [1, 1]
        finally:
            node.stop()


def test_a_write_beside_the_event_log_the_standby_never_confirmed_is_never_acknowledged():
    """A webhook subscription is a row of the view store, written without events
    (projections/postgres_store.py `writing`): its commit is held to the same rule as the
    events'."""
    with replicated_pair(25612) as pair:
        url = pair.url()
        _, (key,), _ = principals_and_keys(url, 1)
        node = Server(url, 4, "--allow-private-webhooks")
        try:
            hook = {"url": "http://127.0.0.1:9/hook"}
            assert answer(node.url, "POST", "/v1/webhooks", key, hook)[0] == 201
            pair.standby.ctl("stop")

            def create(once: str) -> list:
                result: list = []
                sent = {"Idempotency-Key": once}
                threading.Thread(
                    target=lambda: result.append(
                        answer(node.url, "POST", "/v1/webhooks", key, hook, sent)
                    ),
                    daemon=True,
                ).start()
                return result

            result = create("cancelled")
            pair.primary.scalar(f"SELECT pg_cancel_backend({waiting_commit(pair)})")
            assert_unknown(result)

            result = create("settled")
            waiting_commit(pair)  # left waiting: the node's answer deadline ends it
            assert_unknown(result)
        finally:
            node.stop()


def ready(node: Server, key: str) -> tuple[int, list[str]]:
    """/readyz with an agent's key (which sees what anyone does): its status and problems."""
    status, _, body = answer(node.url, "GET", "/readyz", key)
    return status, body["data"]["problems"]


REQUEST_SECONDS = 10.0
"""docs/operations.md: every answer within this, whatever the database does."""


def test_writers_queued_behind_a_commit_no_standby_confirms_are_answered_within_the_bound():
    with replicated_pair(25614) as pair:
        url = pair.url()
        _, (key,), operator = principals_and_keys(url, 1)
        node = Server(url, 8)
        try:
            assert answer(node.url, "POST", "/v1/leases", key, lease("before"))[0] == 201
            assert ready(node, key) == (200, [])
            pair.standby.ctl("stop")
            eventually(lambda: ready(node, key)[0] == 503, "/readyz says writes are blocked")
            status, problems = ready(node, key)
            assert any("writes are blocked" in problem for problem in problems), problems
            timed: list[tuple[str, float, tuple]] = []

            def acquire(resource: str) -> None:
                began = time.monotonic()
                sent = {"Idempotency-Key": resource}
                got = answer(node.url, "POST", "/v1/leases", key, lease(resource), sent)
                timed.append((resource, time.monotonic() - began, got))

            writers = [f"queued-{n}" for n in range(4)]
            threads = [threading.Thread(target=acquire, args=(r,), daemon=True) for r in writers]
            threads[0].start()
            waiting_commit(pair)  # the others queue behind it, on the events table's lock
            for thread in threads[1:]:
                thread.start()
            for thread in threads:
                thread.join(3 * REQUEST_SECONDS)
            assert len(timed) == len(writers), timed
            for resource, seconds, (status, headers, body) in timed:
                assert seconds < REQUEST_SECONDS, (resource, seconds, body)
                assert status == 503 and "retry-after" in headers, (resource, body)
                assert body["error"]["code"] in ("UNAVAILABLE", "OUTCOME_UNKNOWN"), body

            pair.standby.ctl("start")
            wait_for(
                lambda: (
                    pair.primary.scalar(
                        "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'"
                    )
                    == "sync"
                ),
                "the standby is back",
            )
            eventually(lambda: ready(node, key) == (200, []), "/readyz says ready again")
            acks = []
            for resource in writers:
                sent = {"Idempotency-Key": resource}
                status, _, body = answer(node.url, "POST", "/v1/leases", key, lease(resource), sent)
                assert status == 201, body
                acks.append(Ack("acquire", body["data"]["lease_id"], body["data"]["fencing_token"]))
            store = read_store(node.url, operator, writers, pair.primary.url)
            check(acks, store)
            assert [len(store.terms[r]) for r in writers] == [1] * len(writers)
        finally:
            node.stop()
