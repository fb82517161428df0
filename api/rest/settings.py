"""How a server runs: every `titen serve` option in one frozen record, with its default, and
the checks of the options' values.

A pure module (no web framework), so `titen --help` shows the defaults cheaply, and so checking
a flag imports nothing of the server: a server of several workers must set prometheus-client's
multiprocess directory up before anything imports that (api/rest/prefork.py). The command line
builds one from its flags; `create_app` and `serve` read what they need from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from titen.domain.webhooks import DEFAULT_RETRY_SECONDS
from titen.service.database import DEFAULT_POOL_SIZE

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""Where a server of several workers keeps their metrics (prometheus-client's variable): set by
the parent (api/rest/prefork.py) for its workers, read by api/rest/metrics.py."""

ORIGIN_SCHEMES = {"http": 80, "https": 443}
"""The schemes a web origin may have (`--cors-origin`), with the port each leaves unwritten."""

DEFAULT_WORKERS = {"sqlite": 4, "postgres": 2}
"""Server processes when --workers is not given, by backend, as measured."""


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8787
    workers: int | None = None
    """Server processes on the one port; None takes DEFAULT_WORKERS for the backend."""
    threads: int = 16
    """Request worker threads (in each worker process)."""
    max_subscribers: int = 64
    """Open event streams and waiting long-polls served at once (each holds a thread)."""
    max_subscribers_per_org: int = 16
    """Of those, how many one organization may hold, so it cannot take every slot."""
    max_subscribers_per_principal: int = 8
    """Of those, how many one principal may hold."""
    heartbeat_seconds: float = 15.0
    """Comment line sent on a quiet event stream, to keep proxies from closing it."""
    metrics_port: int | None = None
    """Where Prometheus scrapes /metrics; None serves no metrics."""
    metrics_host: str = "127.0.0.1"
    log_format: str | None = None
    """"json" or "text"; None picks text on a terminal, JSON otherwise."""
    webhook_retry_seconds: tuple[float, ...] = DEFAULT_RETRY_SECONDS
    """The pause before each retry of a failed webhook delivery (each jittered by ±20%)."""
    pool_size: int = DEFAULT_POOL_SIZE
    """The most PostgreSQL connections each worker process holds, everything included (its
    LISTEN connections, request threads, webhook workers); none on SQLite."""
    webhook_workers: int = 8
    """Threads delivering webhooks in this process (each delivers one subscription at a time)."""
    allow_private_webhooks: bool = False
    """Let webhooks target loopback, private, link-local and multicast addresses."""
    request_head_timeout: float = 10.0
    """Seconds a connection may take to send a complete request head before it is closed."""
    request_body_timeout: float = 30.0
    """Seconds a request's body may take to arrive, from the end of its head, before the
    request is answered 408 and its connection closed."""
    connection_limit: int = 10_000
    """Open connections accepted at once; idle ones cost a socket each, not a thread."""
    cors_origins: tuple[str, ...] = ()
    """Web origins (`https://app.example.com`) whose pages may call the API; none by default."""
    org_rate: float = 10_000
    """Requests a second each organization may make of this node (api/rest/budget.py); 0 for
    no budget. The default is above what one node serves (docs/performance.md): it stops a
    runaway client on a larger machine, never a benchmark."""


DEFAULTS = ServerSettings()


class BadSettings(ValueError):
    """Options that contradict each other; the message names them."""


def subscriber_quotas(
    total: int, per_org: int | None, per_principal: int | None
) -> tuple[int, int]:
    """The per-organization and per-principal quotas of subscribers, each within the limit
    above it: one not given is its default, lowered to fit (`--max-subscribers 4` alone admits
    4 per organization and per principal); one given above the limit it sits under is refused,
    since it could never be reached."""
    org = min(DEFAULTS.max_subscribers_per_org, total) if per_org is None else per_org
    if org > total:
        raise BadSettings(f"--max-subscribers-per-org {org} is more than --max-subscribers {total}")
    if per_principal is None:
        return org, min(DEFAULTS.max_subscribers_per_principal, org)
    if per_principal > org:
        raise BadSettings(
            f"--max-subscribers-per-principal {per_principal} is more than "
            f"--max-subscribers-per-org {org}"
        )
    return org, per_principal


def parse_origin(text: str) -> str:
    """An origin as a browser sends it in `Origin` (`scheme://host[:port]`, lower case, no
    default port), or ValueError: anything else would silently never match."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or parts.scheme not in ORIGIN_SCHEMES
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or text.endswith("/")
        or parts.path
        or parts.query
        or parts.fragment
        or "?" in text
        or "#" in text
    ):
        raise ValueError(
            f"{text!r} is not an origin: scheme://host[:port], e.g. https://app.example.com"
        )
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    shown_port = "" if port in (None, ORIGIN_SCHEMES[parts.scheme]) else f":{port}"
    return f"{parts.scheme}://{host}{shown_port}"
