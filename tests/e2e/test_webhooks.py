"""Webhook delivery against real servers and real receivers on loopback: signatures, retries,
ordering, isolation, failing and enable, restarts, crashes, and two servers sharing the work."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from tests.receiver import Receiver
from tests.support import Http, Server, eventually
from titen.service.bootstrap import bootstrap

FAST = ("--allow-private-webhooks", "--webhook-retry-seconds", "0.2,0.2,0.2")
ACQUIRE = {"resource_type": "deploy", "resource_id": "r", "purpose": "p", "ttl_seconds": 60}


def keys(database: str, *principals: str, org: str = "acme") -> list[str]:
    services = bootstrap(database, pool_size=2)
    try:
        return [services.keys.create(org, p, "agent") for p in principals]
    finally:
        services.close()


def acquire(http: Http, resource_id: str) -> dict:
    status, body = http.request("POST", "/v1/leases", {**ACQUIRE, "resource_id": resource_id})
    assert status == 201, body
    return body["data"]


def subscribe(http: Http, url: str, **body: object) -> dict:
    status, answer = http.request("POST", "/v1/webhooks", {"url": url, **body})
    assert status == 201, answer
    return answer["data"]


def verified(secret: str, request) -> dict:
    """The delivery's payload, verified as a receiver would with the standardwebhooks package."""
    return Webhook(secret).verify(request.body, request.headers)


def lease_ids(requests) -> list[str]:
    return [json.loads(r.body)["data"]["lease_id"] for r in requests]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


pytestmark = pytest.mark.server(*FAST, threads=4)


def test_deliveries_are_signed_ordered_and_shaped_like_the_event_log(server, receiver):
    (alice,) = keys(server.database, "agent_alice")
    http = Http(server.url, alice)
    before = acquire(http, "before")  # committed before the subscription: never delivered
    webhook = subscribe(http, receiver.url, types=["lease.acquired"])
    acquired = [acquire(http, f"res-{i}")["lease_id"] for i in range(10)]
    got = receiver.wait_for(10)
    assert lease_ids(got) == acquired
    assert before["lease_id"] not in lease_ids(got)
    _, log = http.request("GET", "/v1/events?types=lease.acquired&limit=100")
    served = [e for e in log["data"]["events"] if e["data"]["lease_id"] in acquired]
    for request, event in zip(got, served, strict=True):
        assert request.headers["content-type"] == "application/json"
        assert request.headers["webhook-id"] == event["id"]
        assert verified(webhook["secret"], request) == event  # the same JSON, cursor included
        assert request.path == "/hook"
    tampered = got[0].headers | {"webhook-signature": got[1].headers["webhook-signature"]}
    with pytest.raises(WebhookVerificationError):
        Webhook(webhook["secret"]).verify(got[0].body, tampered)
    eventually(
        lambda: (
            len(
                http.request("GET", f"/v1/webhooks/{webhook['webhook_id']}/deliveries")[1]["data"][
                    "deliveries"
                ]
            )
            == 10
        ),
        "every delivery recorded",
    )
    _, attempts = http.request("GET", f"/v1/webhooks/{webhook['webhook_id']}/deliveries?limit=3")
    newest = attempts["data"]["deliveries"]
    assert [a["event_id"] for a in newest] == [e["id"] for e in reversed(served)][:3]
    assert all(a["status_code"] == 200 and a["error"] is None for a in newest)
    assert newest[0]["response_excerpt"] == "answered 200"
    assert attempts["data"]["next_cursor"]


def test_an_endpoint_failing_twice_gets_the_event_on_the_third_attempt(server):
    answers = iter([500, 302])  # a redirect is a failure too: never followed
    receiver = Receiver(lambda _request: next(answers, 200))
    try:
        (alice,) = keys(server.database, "agent_alice")
        http = Http(server.url, alice)
        webhook = subscribe(http, receiver.url)
        acquire(http, "flaky")
        got = receiver.wait_for(3)
        assert len({r.headers["webhook-id"] for r in got}) == 1
        assert all(verified(webhook["secret"], r)["type"] == "lease.acquired" for r in got)
        path = f"/v1/webhooks/{webhook['webhook_id']}/deliveries"
        eventually(lambda: len(http.request("GET", path)[1]["data"]["deliveries"]) == 3, "3 kept")
        attempts = http.request("GET", path)[1]["data"]["deliveries"]
        assert [(a["attempt"], a["status_code"]) for a in attempts] == [
            (3, 200),
            (2, 302),
            (1, 500),
        ]
        assert attempts[2]["error"] == "HTTP 500"
        assert attempts[2]["response_excerpt"] == "answered 500"
        assert len(receiver.received) == 3  # nothing went to the redirect's location
    finally:
        receiver.close()


def test_a_dead_endpoint_does_not_delay_another_subscription(server, receiver):
    stuck = Receiver(delay=8)
    try:
        (alice,) = keys(server.database, "agent_alice")
        http = Http(server.url, alice)
        subscribe(http, stuck.url)
        subscribe(http, receiver.url)
        started = time.monotonic()
        acquired = [acquire(http, f"r{i}")["lease_id"] for i in range(5)]
        assert lease_ids(receiver.wait_for(5, timeout=5)) == acquired
        assert time.monotonic() - started < 5
        assert len(stuck.received) == 1  # still waiting on its first event
    finally:
        stuck.close()


def test_a_subscription_failing_its_whole_schedule_is_failing_until_enabled(server, receiver):
    healthy = threading.Event()
    flaky = Receiver(lambda _request: 200 if healthy.is_set() else 503)
    try:
        (alice,) = keys(server.database, "agent_alice")
        http = Http(server.url, alice)
        webhook = subscribe(http, flaky.url)
        path = f"/v1/webhooks/{webhook['webhook_id']}"
        first = acquire(http, "a")["lease_id"]
        eventually(lambda: http.request("GET", path)[1]["data"]["status"] == "failing", "failing")
        assert len(flaky.received) == 4  # the first attempt and three retries
        subscribe(http, receiver.url)  # delivered to meanwhile: the deliveries go on
        later = [acquire(http, x)["lease_id"] for x in ("b", "c")]
        healthy.set()
        witness = acquire(http, "d")["lease_id"]
        assert lease_ids(receiver.wait_for(3)) == [*later, witness]
        assert len(flaky.received) == 4  # held while failing
        status, enabled = http.request("POST", f"{path}/enable")
        assert (status, enabled["data"]["status"]) == (200, "active")
        got = flaky.wait_for(8)
        assert lease_ids(got[4:]) == [first, *later, witness]
    finally:
        flaky.close()


def test_rotate_secret_signs_with_the_new_secret_at_once(server, receiver):
    (alice,) = keys(server.database, "agent_alice")
    http = Http(server.url, alice)
    webhook = subscribe(http, receiver.url)
    acquire(http, "a")
    verified(webhook["secret"], receiver.wait_for(1)[0])
    _, rotated = http.request("POST", f"/v1/webhooks/{webhook['webhook_id']}/rotate-secret")
    acquire(http, "b")
    latest = receiver.wait_for(2)[1]
    assert verified(rotated["data"]["secret"], latest)["data"]["resource_id"] == "b"
    with pytest.raises(WebhookVerificationError):
        verified(webhook["secret"], latest)


def test_to_principal_delivers_only_handoffs_addressed_to_it(server, receiver):
    alice, bob, _carol = keys(server.database, "agent_alice", "agent_bob", "agent_carol")
    http = Http(server.url, bob)
    subscribe(http, receiver.url, to_principal="agent_bob")
    acquire(http, "not-a-handoff")
    for n, to in enumerate(("agent_carol", "agent_bob", "agent_carol", "agent_bob", "agent_bob")):
        status, _ = Http(server.url, alice).request(
            "POST", "/v1/handoffs", {"to_principal": to, "subject_id": f"s{n}"}
        )
        assert status == 201
    got = receiver.wait_for(3)  # the last one delivered: each earlier one was decided, in order
    assert [json.loads(r.body)["data"]["subject_id"] for r in got] == ["s1", "s3", "s4"]
    assert {json.loads(r.body)["data"]["to_principal"] for r in got} == {"agent_bob"}


def test_only_events_the_owner_may_read_are_delivered(server, receiver):
    (alice,) = keys(server.database, "agent_alice")
    (mallory,) = keys(server.database, "agent_mallory", org="other")
    subscribe(Http(server.url, alice), receiver.url)
    mine = []
    for n in range(2):  # delivered in log order: the last of mine comes after all of theirs
        acquire(Http(server.url, mallory), f"theirs{n}")  # another organization's events
        mine.append(acquire(Http(server.url, alice), f"mine{n}")["lease_id"])
    got = receiver.wait_for(2)
    assert lease_ids(got) == mine
    assert json.loads(got[0].body)["source"] == "/titen/organizations/acme"


def test_delivery_resumes_after_a_restart_and_after_kill_9(database, receiver):
    healthy = threading.Event()
    healthy.set()
    flaky = Receiver(lambda _request: 200 if healthy.is_set() else 500)
    server = Server(database, 4, *FAST)
    try:
        (alice,) = keys(database, "agent_alice")
        webhook = subscribe(Http(server.url, alice), flaky.url)
        first = [acquire(Http(server.url, alice), f"a{i}")["lease_id"] for i in range(3)]
        flaky.wait_for(3)
        healthy.clear()
        held = [acquire(Http(server.url, alice), f"b{i}")["lease_id"] for i in range(3)]
        flaky.wait_for(4)  # a failed attempt at the first held event
        server.kill()
        healthy.set()
        server = Server(database, 4, *FAST)
        eventually(
            lambda: set(lease_ids(flaky.received)) >= set(first + held),
            "every event delivered after kill -9",
            timeout=30,
        )
        server.stop()  # a clean stop, then a restart: the position is kept
        server = Server(database, 4, *FAST)
        more = acquire(Http(server.url, alice), "c")["lease_id"]
        eventually(lambda: more in lease_ids(flaky.received), "delivered after a restart", 30)
        delivered = [i for i in lease_ids(flaky.received)]
        assert Counter(delivered)[first[0]] == 1  # delivered before the crash: not again
        ordered = list(dict.fromkeys(delivered))
        assert ordered == [*first, *held, more]
        assert webhook["webhook_id"]
    finally:
        server.stop()
        flaky.close()


def test_two_servers_on_postgres_deliver_each_event_once(postgres_database):
    receivers = [Receiver() for _ in range(4)]
    servers = [Server(postgres_database, 4, *FAST) for _ in range(2)]
    try:
        (alice,) = keys(postgres_database, "agent_alice")
        for receiver in receivers:
            subscribe(Http(servers[0].url, alice), receiver.url)
        acquired = [
            acquire(Http(servers[i % 2].url, alice), f"r{i}")["lease_id"] for i in range(20)
        ]
        # One more once the first twenty arrived: the deliveries have gone past them all.
        for receiver in receivers:
            assert lease_ids(receiver.wait_for(20)) == acquired
        acquired.append(acquire(Http(servers[1].url, alice), "last")["lease_id"])
        for receiver in receivers:
            assert lease_ids(receiver.wait_for(21)) == acquired  # once each, in log order
    finally:
        for server in servers:
            server.stop()
        for receiver in receivers:
            receiver.close()
