"""The rules webhooks follow, without a database: targets, addresses, the retry schedule,
the signature, and the target check repeated at delivery."""

from __future__ import annotations

import json
import random
import socket
from dataclasses import replace

import pytest
from standardwebhooks import Webhook as Verifier

from tests.hostile import DRIP_SECONDS, Hostile, banner, close_early, drip, nul
from tests.receiver import Receiver
from tests.support import FakeClock
from titen.domain.errors import InvalidField
from titen.domain.webhooks import (
    RetrySchedule,
    forbidden_address,
    parse_retry_seconds,
    parse_target,
)
from titen.projections.event_log import Published
from titen.service.consumers import Attempt, Consumer
from titen.service.targets import TargetRefused, Targets
from titen.service.webhook_sender import WebhookSender, sign
from titen.service.webhooks import Webhook

EVENT = Published(7, {"id": "abc-1", "type": "lease.acquired", "data": {"lease_id": "l"}}, "c7")


@pytest.mark.parametrize(
    ("address", "forbidden"),
    [
        ("127.0.0.1", True),
        ("10.0.0.1", True),
        ("172.16.5.4", True),
        ("192.168.1.1", True),
        ("169.254.169.254", True),
        ("224.0.0.251", True),
        ("0.0.0.0", True),
        ("::1", True),
        ("fe80::1%eth0", True),
        ("fc00::1", True),
        ("::ffff:10.0.0.1", True),
        ("ff02::1", True),
        ("ff0e::1", True),  # global-scope multicast
        ("100.100.100.200", True),  # carrier-grade NAT, a cloud metadata address
        ("100.64.0.1", True),
        ("::ffff:100.100.100.200", True),
        ("fec0::1", True),  # IPv6 site-local
        ("2002:a9fe:a9fe::", True),  # 6to4 of 169.254.169.254
        ("2002:7f00:1::", True),  # 6to4 of 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", True),  # Teredo
        ("64:ff9b::a9fe:a9fe", True),  # NAT64 of 169.254.169.254
        ("::7f00:1", True),  # IPv4-compatible 127.0.0.1
        ("198.18.0.1", True),  # benchmarking
        ("192.0.2.1", True),  # documentation
        ("93.184.216.34", False),
        ("2606:4700::1111", False),
        ("::ffff:8.8.8.8", False),
        ("2002:808:808::", False),  # 6to4 of a public address
    ],
)
def test_forbidden_addresses(address, forbidden):
    assert forbidden_address(address) is forbidden


def test_targets_parse_port_and_path():
    target = parse_target("https://example.com/in?x=1")
    assert (target.scheme, target.host, target.port, target.path) == (
        "https",
        "example.com",
        443,
        "/in?x=1",
    )
    assert parse_target("http://example.com").path == "/"
    for bad in ("ftp://x/", "http://", "http://a b/", "http://u:p@x/", "x" * 3000):
        with pytest.raises(InvalidField):
            parse_target(bad)


def test_retry_schedule_jitters_within_a_fifth_and_gives_up_or_repeats():
    schedule = RetrySchedule((10.0, 100.0))
    rng = random.Random(1)
    pauses = [schedule.pause(2, rng) for _ in range(1000)]
    assert 80 <= min(pauses) < 85 and 115 < max(pauses) <= 120
    assert schedule.pause(3) is None
    assert 8 <= RetrySchedule((10.0,), gives_up=False).pause(50) <= 12
    assert parse_retry_seconds("5,0.5,300") == (5.0, 0.5, 300.0)
    for bad in ("", "5,,6", "-1", "a", "1e9"):
        with pytest.raises(ValueError):
            parse_retry_seconds(bad)


def resolver(*addresses: str):
    def resolve(host, port, type=None):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]

    return resolve


def test_targets_refuse_any_private_address_unless_allowed():
    target = parse_target("http://hooks.example.com/")
    with pytest.raises(TargetRefused) as private:
        Targets(resolve=resolver("93.184.216.34", "10.0.0.9")).addresses(target)
    assert Targets(True, resolver("10.0.0.9")).addresses(target) == ["10.0.0.9"]
    assert Targets(resolve=resolver("93.184.216.34")).addresses(target) == ["93.184.216.34"]

    def unresolvable(*args, **kwargs):
        raise socket.gaierror("no such host")

    with pytest.raises(TargetRefused) as unresolved:
        Targets(resolve=unresolvable).addresses(target)
    # The same words for both, naming the host and no address: an internal name's address,
    # or whether it resolves at all, is not for whoever registers a webhook to learn.
    assert str(private.value) == str(unresolved.value)
    assert "10.0.0.9" not in str(private.value) and "hooks.example.com" in str(private.value)


def test_signature_is_what_standard_webhooks_verifies():
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"a": 1}'
    now = int(__import__("time").time())
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(now),
        "webhook-signature": sign(secret, "msg_1", now, body),
    }
    assert Verifier(secret).verify(body, headers) == {"a": 1}


def webhook(url: str) -> Webhook:
    return Webhook(
        webhook_id="whk_x",
        seq=1,
        organization="acme",
        owner="agent",
        target=parse_target(url),
        types=("lease.acquired",),
        to_principal=None,
        created_at="",
        secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        status="active",
    )


class OneWebhook:
    def __init__(self, hook: Webhook):
        self.hook = hook

    def for_delivery(self, consumer: Consumer) -> Webhook:
        return self.hook

    def party_of(self, webhook: Webhook) -> str | None:
        return None  # its owner reads the whole log


CONSUMER = Consumer("whk_x", "webhook", "acme", 0, "active", 0, 0.0, 0, None)


def test_a_host_that_now_resolves_privately_is_a_failed_attempt_and_nothing_is_sent():
    receiver = Receiver()
    try:
        port = receiver.server.server_address[1]
        hook = webhook(f"http://hooks.example.com:{port}/hook")
        resolved = ["93.184.216.34"]

        def changing(host, port, type=None):
            return resolver(*resolved)(host, port, type)

        sender = WebhookSender(
            OneWebhook(hook), Targets(resolve=changing), RetrySchedule((1,)), FakeClock()
        )
        resolved[:] = ["127.0.0.1"]  # DNS changed since the subscription was created
        outcome = sender.open(CONSUMER).send([EVENT], 1)
        assert outcome.delivered == 0
        assert outcome.attempt.error.startswith("url host hooks.example.com is not allowed")
        assert outcome.attempt.status_code is None
        assert receiver.received == []
        allowed = WebhookSender(
            OneWebhook(hook), Targets(True, changing), RetrySchedule((1,)), FakeClock()
        )
        assert allowed.open(CONSUMER).send([EVENT], 1).delivered == 1
        request = receiver.wait_for(1)[0]
        assert request.headers["host"] == f"hooks.example.com:{port}"  # pinned, named host
        assert json.loads(request.body)["cursor"]
    finally:
        receiver.close()


def test_an_answer_after_the_timeout_is_a_failed_attempt():
    receiver = Receiver(delay=1.5)
    try:
        hook = webhook(receiver.url)
        sender = WebhookSender(
            OneWebhook(hook), Targets(True), RetrySchedule((1,)), FakeClock(), timeout=0.5
        )
        outcome = sender.open(CONSUMER).send([EVENT], 1)
        assert outcome.delivered == 0
        assert outcome.attempt.error == "no answer within 0.5 s"
        assert outcome.attempt.status_code is None
        assert len(receiver.received) == 1  # it was sent; the answer came too late
    finally:
        receiver.close()


def test_the_response_excerpt_is_the_first_kibibyte_of_the_answer():
    receiver = Receiver(reply=b"x" * 5000)
    try:
        sender = WebhookSender(
            OneWebhook(webhook(receiver.url)), Targets(True), RetrySchedule((1,)), FakeClock()
        )
        attempt = sender.open(CONSUMER).send([EVENT], 1).attempt
        assert (attempt.status_code, attempt.error) == (200, None)
        assert attempt.response_excerpt == "x" * 1024
    finally:
        receiver.close()


def sent_to(behaviour, timeout: float = 10.0) -> tuple[Attempt, Hostile]:
    """One attempt against a hostile receiver on loopback, and the receiver."""
    hostile = Hostile(behaviour)
    try:
        sender = WebhookSender(
            OneWebhook(webhook(hostile.url)),
            Targets(True),
            RetrySchedule((1,)),
            FakeClock(),
            timeout=timeout,
        )
        return sender.open(CONSUMER).send([EVENT], 1).attempt, hostile
    finally:
        hostile.close()


def test_a_dripping_answer_is_cut_at_the_deadline_not_at_a_read_timeout():
    attempt, hostile = sent_to(drip, timeout=1.0)
    assert attempt.error == "no answer within 1 s" and attempt.status_code is None
    hostile.wait_for(lambda: hostile.connections[0].closed is not None)
    (connection,) = hostile.connections
    # It drips every DRIP_INTERVAL, inside any read timeout, for a minute if let.
    assert connection.closed - connection.opened < DRIP_SECONDS / 2


def test_control_bytes_of_an_answer_are_kept_as_printable_text():
    attempt, _ = sent_to(nul)
    assert (attempt.status_code, attempt.error) == (200, None)
    assert attempt.response_excerpt == "ok\ufffd\ufffd\ufffd[31m\ufffddone"


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        (close_early, "connection closed before an answer"),
        (banner, "not an HTTP answer"),
    ],
)
def test_an_error_names_the_kind_of_failure_not_the_remote_bytes(behaviour, error):
    attempt, _ = sent_to(behaviour)
    assert attempt.error == error
    assert attempt.response_excerpt is None


def test_a_url_that_cannot_be_sent_is_a_recorded_attempt_not_an_exception():
    """A URL an earlier release accepted, which cannot be sent as given."""
    receiver = Receiver()
    try:
        hook = webhook(receiver.url)
        hook = replace(hook, target=replace(hook.target, path="/caf\u00e9"))
        sender = WebhookSender(OneWebhook(hook), Targets(True), RetrySchedule((1,)), FakeClock())
        outcome = sender.open(CONSUMER).send([EVENT], 1)
        assert outcome.delivered == 0
        assert outcome.attempt.error == "url cannot be sent as given"
        assert receiver.received == []
    finally:
        receiver.close()


@pytest.mark.parametrize(
    "url", ["http://example.com/caf\u00e9", "http://ex\u00e4mple.com/", "http://example.com/a\x7fb"]
)
def test_a_url_that_cannot_be_sent_as_given_is_refused(url):
    with pytest.raises(InvalidField) as refused:
        parse_target(url)
    assert refused.value.field == "url"
