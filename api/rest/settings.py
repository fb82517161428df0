"""Every `titen serve` option in one frozen record, with its default and the checks of its value.
Pure (no web framework): `titen --help` shows the defaults cheaply, and checking a flag imports
nothing that would import prometheus-client before its multiprocess directory is set
(api/rest/prefork.py)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from titen.domain.webhooks import DEFAULT_RETRY_SECONDS
from titen.service.database import DEFAULT_POOL_SIZE

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # the workers' metrics files (prefork.py)
ORIGIN_SCHEMES = {"http": 80, "https": 443}  # an origin's schemes, with their default ports
DEFAULT_WORKERS = {"sqlite": 4, "postgres": 2}  # server processes by backend, as measured


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8787
    workers: int | None = None  # None: DEFAULT_WORKERS for the backend
    threads: int = 16  # request threads in each worker process
    max_subscribers: int = 64  # streams and waiting long-polls at once (each holds a thread)
    max_subscribers_per_org: int = 16
    max_subscribers_per_principal: int = 8
    heartbeat_seconds: float = 15.0  # a comment line on a quiet stream, for proxies
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    log_format: str | None = None  # "json" or "text"; None: text on a terminal, else JSON
    webhook_retry_seconds: tuple[float, ...] = DEFAULT_RETRY_SECONDS  # each jittered ±20%
    pool_size: int = DEFAULT_POOL_SIZE
    """The most PostgreSQL connections each worker process holds, everything included."""
    webhook_workers: int = 8  # threads delivering webhooks, one subscription at a time each
    allow_private_webhooks: bool = False
    request_head_timeout: float = 10.0  # seconds to send a whole head, else closed
    request_body_timeout: float = 30.0  # seconds from the head's end to the body's, else 408
    connection_limit: int = 10_000  # an idle connection costs a socket, not a thread
    cors_origins: tuple[str, ...] = ()
    org_rate: float = 10_000
    """Requests a second each organization may make of this node (0: no budget): above what
    one node serves, it stops a runaway client on a larger machine, never a benchmark."""


DEFAULTS = ServerSettings()


class BadSettings(ValueError):
    """Options that contradict each other."""


def subscriber_quotas(
    total: int, per_org: int | None, per_principal: int | None
) -> tuple[int, int]:
    """The per-organization and per-principal quotas, each within the limit above it: one not
    given is its default lowered to fit; one given above it is refused (never reached)."""
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
    """An origin as a browser sends it (`scheme://host[:port]`, lower case, no default port), or
    ValueError: anything else would silently never match."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:  # an unclosed `[`, a port out of range
        parts, port = SplitResult("", "", "", "", ""), None
    if (
        parts.scheme not in ORIGIN_SCHEMES
        or not parts.hostname
        or "@" in parts.netloc
        or text.lower() != f"{parts.scheme}://{parts.netloc}".lower()  # a path, query, ...
    ):
        raise ValueError(
            f"{text!r} is not an origin: scheme://host[:port], e.g. https://app.example.com"
        )
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    shown_port = "" if port in (None, ORIGIN_SCHEMES[parts.scheme]) else f":{port}"
    return f"{parts.scheme}://{host}{shown_port}"
