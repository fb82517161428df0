"""Receivers that misbehave, against a real server on both backends: one organization's
dripping receivers hold fewer than all the workers and each of them for at most the deadline,
so another organization's delivery waits less than one deadline; and what a stalling,
NUL-answering, hanging-up or non-HTTP receiver does ends as one recorded attempt, retried on
the schedule, never resent because recording it failed."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from tests.hostile import Hostile, banner, close_early, drip, nul, stall
from tests.receiver import Receiver
from tests.support import Http, eventually
from titen.domain.webhooks import DELIVERY_TIMEOUT_SECONDS
from titen.service.bootstrap import bootstrap
from titen.service.workers import per_organization

RETRY = 2.0
OPTIONS = ("--allow-private-webhooks", "--webhook-retry-seconds", f"{RETRY},{RETRY},{RETRY}")
pytestmark = [pytest.mark.slow, pytest.mark.server(*OPTIONS, threads=4)]
WORKERS = 8
"""titen serve's default --webhook-workers."""
ACQUIRE = {"resource_type": "deploy", "purpose": "p", "ttl_seconds": 60}


def key(database: str, organization: str) -> str:
    services = bootstrap(database, pool_size=2)
    try:
        return services.keys.create(organization, "agent", "agent")
    finally:
        services.close()


def acquire(http: Http, resource_id: str) -> None:
    status, body = http.request("POST", "/v1/leases", {**ACQUIRE, "resource_id": resource_id})
    assert status == 201, body


def subscribe(http: Http, url: str) -> str:
    status, answer = http.request("POST", "/v1/webhooks", {"url": url})
    assert status == 201, answer
    return answer["data"]["webhook_id"]


def attempts(http: Http, webhook_id: str) -> list[dict]:
    """The webhook's recorded attempts, oldest first."""
    status, answer = http.request("GET", f"/v1/webhooks/{webhook_id}/deliveries")
    assert status == 200, answer
    return answer["data"]["deliveries"][::-1]


def recorded(http: Http, webhook_id: str, count: int) -> list[dict]:
    eventually(lambda: len(attempts(http, webhook_id)) >= count, f"{count} attempts", 40)
    return attempts(http, webhook_id)


def test_dripping_receivers_of_one_organization_delay_another_by_less_than_one_deadline(
    server,
):
    dripping, healthy = Hostile(drip), Receiver()
    try:
        acme = Http(server.url, key(server.database, "acme"))
        globex = Http(server.url, key(server.database, "globex"))
        held = [subscribe(acme, dripping.url) for _ in range(WORKERS)]
        subscribe(globex, healthy.url)
        acquire(acme, "a")
        cap = per_organization(WORKERS)
        dripping.wait_for(lambda: dripping.open() == cap)  # all the workers acme may hold

        sent = time.time()
        acquire(globex, "b")
        delay = healthy.wait_for(1)[0].at - sent
        assert dripping.open() == cap  # delivered while acme still held all it may hold
        assert delay < DELIVERY_TIMEOUT_SECONDS  # it was 38-40 s, behind every worker

        for webhook_id in held:
            (first, *_) = recorded(acme, webhook_id, 1)
            assert first["error"] == f"no answer within {DELIVERY_TIMEOUT_SECONDS:g} s"
            assert first["status_code"] is None
            # Cut at the deadline, where a per-read timeout let it run for 40 s.
            assert first["duration_ms"] < (DELIVERY_TIMEOUT_SECONDS + 2) * 1000
        assert dripping.most_at_once == cap
        for connection in dripping.connections[:WORKERS]:
            assert connection.closed is not None  # the client hung up, not the receiver
            assert connection.closed - connection.opened < DELIVERY_TIMEOUT_SECONDS + 2
    finally:
        dripping.close()
        healthy.close()


def test_each_misbehaviour_is_one_recorded_attempt_on_the_retry_schedule(server):
    receivers = {
        "stall": Hostile(stall),
        "nul": Hostile(nul),
        "close": Hostile(close_early),
        "banner": Hostile(banner),
    }
    try:
        acme = Http(server.url, key(server.database, "acme"))
        hooks = {name: subscribe(acme, r.url) for name, r in receivers.items()}
        acquire(acme, "one")
        acquire(acme, "two")

        # NUL and control bytes in a 200 answer: both events delivered once each, the
        # excerpt kept as printable text (PostgreSQL refuses NUL: it was resent 60 times).
        answered = recorded(acme, hooks["nul"], 2)
        assert [a["error"] for a in answered] == [None, None]
        excerpt = answered[0]["response_excerpt"]
        assert excerpt.startswith("ok") and excerpt.endswith("done")
        assert all(c.isprintable() for c in excerpt)
        assert len(receivers["nul"].connections) == 2

        closed = recorded(acme, hooks["close"], 2)
        assert [a["error"] for a in closed] == ["connection closed before an answer"] * 2
        assert [a["attempt"] for a in closed] == [1, 2]
        # The second attempt waited its pause (jittered by a fifth), not a tight loop.
        apart = _at(closed[1]) - _at(closed[0])
        assert apart >= RETRY * 0.8

        (spoken, *_) = recorded(acme, hooks["banner"], 1)
        assert spoken["error"] == "not an HTTP answer"  # the kind, never the remote bytes
        assert "SSH" not in str(spoken)

        (stalled, *_) = recorded(acme, hooks["stall"], 1)
        assert stalled["error"] == f"no answer within {DELIVERY_TIMEOUT_SECONDS:g} s"
    finally:
        for receiver in receivers.values():
            receiver.close()


def test_a_url_that_cannot_be_sent_as_given_is_refused_at_registration(server):
    acme = Http(server.url, key(server.database, "acme"))
    for url in ("http://127.0.0.1:9/café", "http://127.0.0.1:9/a\x7fb"):
        status, answer = acme.request("POST", "/v1/webhooks", {"url": url})
        assert status == 400, answer
        assert answer["error"]["code"] == "VALIDATION_ERROR"
        assert answer["error"]["message"].startswith("url ")
    assert acme.request("GET", "/v1/webhooks")[1]["data"]["webhooks"] == []


def _at(attempt: dict) -> float:
    return datetime.fromisoformat(attempt["attempted_at"].replace("Z", "+00:00")).timestamp()
