"""Delivering one event to one webhook: the Standard Webhooks signature and the HTTP POST.

http.client rather than an HTTP library: a delivery must connect to the address the target
check approved (service/targets.py) while still sending the URL's host name (and, for https,
verifying the certificate for it), and must never follow a redirect; http.client does exactly
that with a two-line `connect`, and follows nothing.
"""

from __future__ import annotations

import base64
import errno
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
from titen.service.deadline import Deadline
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
        if webhook is None:
            return None
        return _Subscription(self, webhook, self.webhooks.party_of(webhook))


@dataclass
class _Subscription:
    sender: WebhookSender
    webhook: Webhook
    party: str | None
    """Whose events it delivers (`Webhooks.party_of`): None for the organization's."""

    def wants(self, event: Published) -> bool:
        kind = event.event["type"]
        if kind not in self.webhook.types:
            return False
        if self.party is not None and self.party not in event.parties:
            return False
        if self.webhook.to_principal is None:
            return True
        data = event.event.get("data") or {}
        return kind.startswith("handoff.") and data.get("to_principal") == self.webhook.to_principal

    def send(self, events: Sequence[Published], attempt: int) -> Outcome:
        event = events[0]
        body = json.dumps(event.served()).encode()
        message_id = event.event["id"]
        now = self.sender.clock.now()  # signed and recorded alike: the database's on PostgreSQL
        timestamp = int(now.timestamp())
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(self.webhook.secret, message_id, timestamp, body),
        }
        attempted_at = iso(now)
        started = time.monotonic()
        status, excerpt, error, outcome = None, None, None, "delivered"
        deadline = Deadline(self.sender.timeout)
        try:
            addresses = self.sender.targets.addresses(self.webhook.target)
            with deadline:
                answer = _post(self.webhook.target, addresses, body, headers, deadline)
            if deadline.passed:  # cut short: http.client may take what it read for an answer
                raise TimeoutError
            status, excerpt = answer
        except TargetRefused as refused:
            error, outcome = str(refused), "refused"
        except Exception as failed:  # every failure is a recorded attempt
            error, outcome = _describe(failed, deadline)
        elapsed = time.monotonic() - started
        if status is not None and not 200 <= status < 300:  # an answer came: error is None
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


def printable(text: str) -> str:
    """`text` with every character that is not printable (NUL and other control characters, but
    not newlines and tabs) replaced by U+FFFD: what a receiver answers is shown and stored as
    text, and PostgreSQL refuses NUL in text outright."""
    return "".join(c if c.isprintable() or c in "\n\t" else "\ufffd" for c in text)


def _post(
    target: Target, addresses: list[str], body: bytes, headers: dict, deadline: Deadline
) -> tuple[int, str]:
    """POST to the first address that accepts a connection; the status and a response excerpt."""
    last: OSError | None = None
    for address in addresses:
        conn = _connection(target, address, deadline)
        try:
            try:
                conn.connect()
            except OSError as refused:
                last = refused
                continue
            conn.request("POST", target.path, body=body, headers=headers)
            response = conn.getresponse()
            excerpt = response.read(RESPONSE_EXCERPT_BYTES)
            return response.status, printable(excerpt.decode("utf-8", errors="replace"))
        finally:
            conn.close()
    raise last or OSError("no address to connect to")


class _Pinned(http.client.HTTPConnection):
    """HTTP to a checked address, with the URL's host in the Host header."""

    def __init__(self, host: str, port: int, address: str, deadline: Deadline):
        super().__init__(host, port, timeout=deadline.seconds)
        self.address = address
        self.deadline = deadline

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.deadline.left())
        self.deadline.watch(self.sock)


class _PinnedTLS(http.client.HTTPSConnection):
    """HTTPS to a checked address, the certificate verified for the URL's host."""

    def __init__(self, host: str, port: int, address: str, deadline: Deadline):
        self.tls = ssl.create_default_context()
        super().__init__(host, port, timeout=deadline.seconds, context=self.tls)
        self.address = address
        self.deadline = deadline

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.deadline.left())
        self.deadline.watch(sock)
        # The handshake runs after the TLS socket is watched, so the deadline covers it too.
        self.sock = self.tls.wrap_socket(
            sock, server_hostname=self.host, do_handshake_on_connect=False
        )
        self.deadline.watch(self.sock)
        self.sock.do_handshake()


def _connection(target: Target, address: str, deadline: Deadline) -> http.client.HTTPConnection:
    kind = _PinnedTLS if target.scheme == "https" else _Pinned
    return kind(target.host, target.port, address, deadline)


def _describe(failed: Exception, deadline: Deadline) -> tuple[str, str]:
    """The recorded error and the metric's outcome for a failed attempt: the kind of failure in
    this service's words, never the receiver's bytes (a banner in an error would make webhooks
    a port prober)."""
    if deadline.passed or isinstance(failed, TimeoutError):
        return f"no answer within {deadline.seconds:g} s", "timeout"
    for kinds, words in _FAILURES:
        if isinstance(failed, kinds):
            return words, "unreachable"
    name = errno.errorcode.get(failed.errno or 0) if isinstance(failed, OSError) else None
    if name is not None:
        return f"network error ({name})", "unreachable"
    return f"failed ({type(failed).__name__})", "unreachable"


_FAILURES: tuple[tuple[type[Exception] | tuple[type[Exception], ...], str], ...] = (
    (ConnectionRefusedError, "connection refused"),
    (http.client.RemoteDisconnected, "connection closed before an answer"),
    ((ConnectionResetError, BrokenPipeError), "connection reset"),
    (ssl.SSLCertVerificationError, "TLS certificate not valid for the host"),
    (ssl.SSLError, "TLS failed"),
    (http.client.IncompleteRead, "answer cut short"),
    (http.client.HTTPException, "not an HTTP answer"),
    (UnicodeError, "url cannot be sent as given"),
)
"""Failures by kind, most specific first."""
