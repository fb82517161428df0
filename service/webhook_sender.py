"""Delivering one event to one webhook: the Standard Webhooks signature and the HTTP POST.

http.client rather than an HTTP library: a delivery must connect to the address the target
check approved (service/targets.py) while still sending the URL's host name (and, for https,
verifying the certificate for it), and must never follow a redirect; http.client does exactly
that with a two-line `connect`, and follows nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass

from titen.domain.clock import Clock, iso
from titen.domain.webhooks import (
    DELIVERY_TIMEOUT_SECONDS,
    RESPONSE_EXCERPT_BYTES,
    SECRET_PREFIX,
    RetrySchedule,
    Target,
)
from titen.projections.event_log import Published
from titen.service import metrics
from titen.service.consumers import Attempt, Consumer, Outcome
from titen.service.targets import TargetRefused, Targets
from titen.service.webhooks import KIND, Webhook, Webhooks

USER_AGENT = "titen-webhooks/1"


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """`v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` under the decoded secret."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


class WebhookSender:
    """The webhook sink of the delivery mechanism: one event per attempt, every attempt kept."""

    kind = KIND
    batch = 1

    def __init__(
        self,
        webhooks: Webhooks,
        targets: Targets,
        schedule: RetrySchedule,
        clock: Clock,
        timeout: float = DELIVERY_TIMEOUT_SECONDS,
    ):
        self.webhooks = webhooks
        self.targets = targets
        self.schedule = schedule
        self.clock = clock
        self.timeout = timeout

    def open(self, consumer: Consumer) -> _Subscription | None:
        webhook = self.webhooks.for_delivery(consumer)
        return _Subscription(self, webhook) if webhook else None


@dataclass
class _Subscription:
    sender: WebhookSender
    webhook: Webhook

    def wants(self, event: Published) -> bool:
        kind = event.event["type"]
        if kind not in self.webhook.types:
            return False
        if self.webhook.to_principal is None:
            return True
        data = event.event.get("data") or {}
        return kind.startswith("handoff.") and data.get("to_principal") == self.webhook.to_principal

    def send(self, events: Sequence[Published], attempt: int) -> Outcome:
        event = events[0]
        body = json.dumps(event.served()).encode()
        message_id = event.event["id"]
        timestamp = int(time.time())
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(self.webhook.secret, message_id, timestamp, body),
        }
        attempted_at = iso(self.sender.clock.now())
        started = time.monotonic()
        status, excerpt, error, outcome = None, None, None, "delivered"
        try:
            addresses = self.sender.targets.addresses(self.webhook.target)
            status, excerpt = _post(self.webhook.target, addresses, body, headers, self.sender)
        except TargetRefused as refused:
            error, outcome = str(refused), "refused"
        except (OSError, http.client.HTTPException) as failed:
            error = _describe(failed)
            outcome = "timeout" if isinstance(failed, TimeoutError) else "unreachable"
        elapsed = time.monotonic() - started
        if error is None and elapsed > self.sender.timeout:
            error, outcome = f"no answer within {self.sender.timeout:g} s", "timeout"
        elif status is not None and not 200 <= status < 300:  # an answer came: error is None
            error, outcome = f"HTTP {status}", "rejected"
        metrics.WEBHOOK_DELIVERIES.labels(outcome).inc()
        record = Attempt(
            event_id=message_id,
            attempt=attempt,
            attempted_at=attempted_at,
            status_code=status,
            error=error,
            duration_ms=round(elapsed * 1000),
            response_excerpt=excerpt,
        )
        return Outcome(delivered=0 if error else 1, attempt=record)


def _post(
    target: Target, addresses: list[str], body: bytes, headers: dict, sender: WebhookSender
) -> tuple[int, str]:
    """POST to the first address that accepts a connection; the status and a response excerpt."""
    last: OSError | None = None
    for address in addresses:
        conn = _connection(target, address, sender.timeout)
        try:
            try:
                conn.connect()
            except OSError as refused:
                last = refused
                continue
            conn.request("POST", target.path, body=body, headers=headers)
            response = conn.getresponse()
            excerpt = response.read(RESPONSE_EXCERPT_BYTES)
            return response.status, excerpt.decode("utf-8", errors="replace")
        finally:
            conn.close()
    raise last or OSError("no address to connect to")


class _Pinned(http.client.HTTPConnection):
    """HTTP to a checked address, with the URL's host in the Host header."""

    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    """HTTPS to a checked address, the certificate verified for the URL's host."""

    def __init__(self, host: str, port: int, address: str, timeout: float):
        self.tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


def _connection(target: Target, address: str, timeout: float) -> http.client.HTTPConnection:
    kind = _PinnedTLS if target.scheme == "https" else _Pinned
    return kind(target.host, target.port, address, timeout)


def _describe(failed: Exception) -> str:
    if isinstance(failed, TimeoutError | socket.timeout):
        return "timed out"
    return f"{type(failed).__name__}: {failed}".rstrip(": ")
