"""What a webhook subscription may be: its target URL, its filter, its retry schedule. No I/O.

The checks that need the network (what a host resolves to) live in service/targets.py; the
rules they apply to each address are here, so the create route and every delivery judge an
address the same way.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from titen.domain.errors import InvalidField

WEBHOOK = "whk_"
SECRET_PREFIX = "whsec_"
URL_LENGTH = 2048
MAX_WEBHOOKS_PER_PRINCIPAL = 100
DELIVERY_TIMEOUT_SECONDS = 10.0
RESPONSE_EXCERPT_BYTES = 1024
JITTER = 0.2
"""Each pause is stretched or shrunk by up to this fraction, so endpoints that failed together
are not all retried in the same instant."""
DEFAULT_RETRY_SECONDS = (5, 30, 120, 600, 1800, 3600, 7200, 14400, 28800, 28800)
"""The pause before each retry: 11 attempts over about 23.7 hours."""


@dataclass(frozen=True)
class Target:
    """A webhook URL taken apart: where to connect and what to ask for."""

    url: str
    scheme: str
    host: str
    port: int
    path: str


def parse_target(url: str) -> Target:
    """The parts of an http(s) URL, or InvalidField("url") saying what is wrong with it."""
    if len(url) > URL_LENGTH:
        raise InvalidField("url", f"url must be at most {URL_LENGTH} characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidField("url", "url is not a valid URL.") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidField("url", "url must be an http:// or https:// URL.")
    if not parts.hostname:
        raise InvalidField("url", "url must name a host.")
    if parts.username is not None or parts.password is not None:
        raise InvalidField("url", "url must not carry credentials.")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise InvalidField("url", "url must not contain spaces or control characters.")
    if not url.isascii():
        # The request line and Host header are sent as ASCII: refusing here, not at every
        # delivery, keeps a URL that could never be sent from being accepted.
        raise InvalidField(
            "url",
            "url must be ASCII: percent-encode other characters in the path and query, and give"
            " an international host name in its xn-- form.",
        )
    return Target(
        url=url,
        scheme=parts.scheme,
        host=parts.hostname,
        port=port or (443 if parts.scheme == "https" else 80),
        path=_request_path(parts),
    )


def _request_path(parts: SplitResult) -> str:
    path = parts.path or "/"
    return f"{path}?{parts.query}" if parts.query else path


NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
"""Prefixes whose last 32 bits are an IPv4 address a NAT64 gateway forwards to."""


def forbidden_address(address: str) -> bool:
    """Whether an address is one a webhook must not reach unless private targets are allowed:
    any address that is not globally reachable (Python's `is_global`: loopback, private,
    carrier-grade NAT, link-local, documentation...), multicast, reserved (the deprecated
    IPv4-compatible ::a.b.c.d among them), IPv6 site-local, and
    any IPv6 address whose embedded IPv4 address (6to4, Teredo, NAT64) is one: those forms reach
    the IPv4 address they carry. An IPv4-mapped address is judged as the IPv4 address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # the IPv4 address itself, in an IPv6 socket's spelling
    return any(_not_global(each) for each in (ip, *_embedded(ip)))


def _not_global(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    site_local = isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local
    return not ip.is_global or ip.is_multicast or ip.is_reserved or site_local


def _embedded(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries and leads to."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    carried = [ip.sixtofour, *(ip.teredo or ())]
    if any(ip in prefix for prefix in NAT64):
        carried.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return [each for each in carried if each is not None]


@dataclass(frozen=True)
class RetrySchedule:
    """The pauses between attempts at one event; `gives_up` marks the consumer failing once
    they run out, otherwise the last pause repeats for ever (the relay)."""

    pauses: tuple[float, ...]
    gives_up: bool = True

    def pause(self, failures: int, rng: random.Random | None = None) -> float | None:
        """Seconds to wait after the `failures`-th failed attempt, jittered; None to give up."""
        if failures > len(self.pauses):
            if self.gives_up:
                return None
            failures = len(self.pauses)
        base = self.pauses[failures - 1]
        return base * (1 + (rng or random).uniform(-JITTER, JITTER))


def parse_retry_seconds(text: str) -> tuple[float, ...]:
    """`--webhook-retry-seconds 5,30,300`: one or more non-negative numbers, fractions allowed."""
    try:
        pauses = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise ValueError(
            f"retry seconds must be comma-separated numbers, e.g. 5,30,300 (got {text!r})"
        ) from None
    if not all(0 <= pause <= 7 * 86_400 for pause in pauses):
        raise ValueError("each retry pause must be from 0 to 604800 seconds")
    return pauses


def validate_types(types: Sequence[str], published: Sequence[str]) -> tuple[str, ...]:
    """The chosen event types, each published, each once, in the order given."""
    if not types:
        raise InvalidField("types", f"types must name at least one of: {', '.join(published)}.")
    unknown = [t for t in types if t not in published]
    if unknown:
        raise InvalidField(
            "types", f"types has unknown event type {unknown[0]!r}: use {', '.join(published)}."
        )
    return tuple(dict.fromkeys(types))
