"""`titen serve`: the REST API under waitress."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from titen.api.cli.options import database_command, open_services
from titen.api.rest.settings import (
    DEFAULT_WORKERS,
    DEFAULTS,
    ServerSettings,
    subscriber_quotas,
)
from titen.service.database import parse


def add_commands(commands: Any) -> None:
    serve = database_command(commands, "serve", "serve the REST API", _serve)
    serve.set_defaults(until_stopped=True)
    serve.add_argument(
        "--host", default=DEFAULTS.host, help="the address to listen on (default: %(default)s)"
    )
    serve.add_argument(
        "--port",
        type=int,
        default=DEFAULTS.port,
        help="the port to listen on (default: %(default)s)",
    )
    serve.add_argument(
        "--workers",
        type=_process_count,
        default=DEFAULTS.workers,
        help="server processes sharing the port and the database (default: "
        + ", ".join(f"{n} on {kind}" for kind, n in DEFAULT_WORKERS.items())
        + "); the limits below apply to each",
    )
    serve.add_argument(
        "--threads",
        type=int,
        default=DEFAULTS.threads,
        help="request worker threads in each worker process (default: %(default)s)",
    )
    serve.add_argument(
        "--pool-size",
        type=_pool_size,
        default=DEFAULTS.pool_size,
        help="the most PostgreSQL connections each worker process holds, everything included, "
        f"at least {MIN_POOL_SIZE} (default {DEFAULTS.pool_size}; opened as needed, closed when "
        "idle; a node holds at most workers x pool-size, plus 3 in the parent while it starts; "
        "docs/deployment.md)",
    )
    serve.add_argument(
        "--max-subscribers",
        type=_positive,
        default=DEFAULTS.max_subscribers,
        help="open event streams and waiting long-polls served at once (each has its own "
        f"thread; default {DEFAULTS.max_subscribers})",
    )
    serve.add_argument(
        "--max-subscribers-per-org",
        type=_positive,
        default=None,
        help="of those, how many one organization may hold (default "
        f"{DEFAULTS.max_subscribers_per_org}, at most --max-subscribers)",
    )
    serve.add_argument(
        "--max-subscribers-per-principal",
        type=_positive,
        default=None,
        help="of those, how many one principal may hold (default "
        f"{DEFAULTS.max_subscribers_per_principal}, at most --max-subscribers-per-org)",
    )
    serve.add_argument(
        "--request-head-timeout",
        type=float,
        default=DEFAULTS.request_head_timeout,
        help="seconds a connection may take to send a complete request head before it is "
        "closed (default: %(default)s)",
    )
    serve.add_argument(
        "--request-body-timeout",
        type=_seconds,
        default=DEFAULTS.request_body_timeout,
        metavar="SECONDS",
        help="seconds a request's body may take to arrive after its head before the request "
        "is answered 408 and its connection closed (default: %(default)s)",
    )
    serve.add_argument(
        "--connection-limit",
        type=int,
        default=DEFAULTS.connection_limit,
        help="open connections accepted at once; idle ones hold no thread (default: %(default)s)",
    )
    serve.add_argument(
        "--heartbeat-seconds",
        type=float,
        default=DEFAULTS.heartbeat_seconds,
        help="seconds between the comment lines sent on a quiet event stream, to keep proxies "
        "from closing it (default: %(default)s)",
    )
    serve.add_argument(
        "--metrics-port",
        type=_port,
        default=DEFAULTS.metrics_port,
        help="serve Prometheus metrics at /metrics on this port (default: no metrics)",
    )
    serve.add_argument(
        "--metrics-host",
        default=DEFAULTS.metrics_host,
        help="the address of the metrics listener (default: %(default)s)",
    )
    serve.add_argument(
        "--log-format",
        choices=("json", "text"),
        default=DEFAULTS.log_format,
        help="one line per request as JSON or text (default: text on a terminal, else json)",
    )

    serve.add_argument(
        "--webhook-retry-seconds",
        type=_retry_seconds,
        default=DEFAULTS.webhook_retry_seconds,
        metavar="5,30,300,...",
        help="the pause before each retry of a failed webhook delivery, jittered by ±20%% "
        "(default: "
        + ",".join(f"{seconds:g}" for seconds in DEFAULTS.webhook_retry_seconds)
        + ", about a day in all; docs/webhooks.md)",
    )
    serve.add_argument(
        "--webhook-workers",
        type=_workers,
        default=DEFAULTS.webhook_workers,
        help=f"threads delivering webhooks in this process, 1-256 (default "
        f"{DEFAULTS.webhook_workers}; docs/webhooks.md)",
    )
    serve.add_argument(
        "--cors-origin",
        dest="cors_origins",
        action="append",
        type=_origin,
        default=[],
        metavar="ORIGIN",
        help="let pages from this web origin (https://app.example.com) call the API; "
        "repeatable (default: none; docs/event-log.md)",
    )
    serve.add_argument(
        "--org-rate",
        type=_rate,
        default=DEFAULTS.org_rate,
        metavar="N",
        help=f"requests a second each organization may make of this node, all workers "
        f"together, in bursts of twice that; past it 429 (default {DEFAULTS.org_rate:g}; 0: "
        f"no budget; docs/security.md)",
    )
    serve.add_argument(
        "--allow-private-webhooks",
        action="store_true",
        help="let webhooks target loopback, private, link-local and multicast addresses "
        "(default: refused)",
    )


def _retry_seconds(text: str) -> tuple[float, ...]:
    from titen.domain.webhooks import parse_retry_seconds

    try:
        return parse_retry_seconds(text)
    except ValueError as refused:
        raise argparse.ArgumentTypeError(str(refused)) from None


def _settings(args: argparse.Namespace) -> ServerSettings:
    per_org, per_principal = subscriber_quotas(
        args.max_subscribers, args.max_subscribers_per_org, args.max_subscribers_per_principal
    )
    return ServerSettings(
        host=args.host,
        port=args.port,
        workers=args.workers or DEFAULT_WORKERS[parse(args.database).kind],
        threads=args.threads,
        max_subscribers=args.max_subscribers,
        max_subscribers_per_org=per_org,
        max_subscribers_per_principal=per_principal,
        request_head_timeout=args.request_head_timeout,
        request_body_timeout=args.request_body_timeout,
        connection_limit=args.connection_limit,
        heartbeat_seconds=args.heartbeat_seconds,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        log_format=args.log_format,
        webhook_retry_seconds=args.webhook_retry_seconds,
        webhook_workers=args.webhook_workers,
        pool_size=args.pool_size,
        allow_private_webhooks=args.allow_private_webhooks,
        cors_origins=tuple(dict.fromkeys(args.cors_origins)),
        org_rate=args.org_rate,
    )


def _rate(text: str) -> float:
    """Requests a second: a finite number, 0 or more."""
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0 <= rate < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a rate (requests a second, 0 or more)")
    return rate


def _origin(text: str) -> str:
    from titen.api.rest.settings import parse_origin

    try:
        return parse_origin(text)
    except ValueError as refused:
        raise argparse.ArgumentTypeError(str(refused)) from None


def _workers(text: str) -> int:
    """At least one: with none, subscriptions would be accepted and never delivered."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= 256:
        raise argparse.ArgumentTypeError(f"{text!r} is not a worker count (1-256)")
    return count


def _seconds(text: str) -> float:
    """A number of seconds above 0 (and finite)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return seconds


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)")
    return port


def _at_least(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse type for a count of `minimum` or more; a refusal says it is not `what`."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    return count


_positive = _at_least(1, "a whole number of 1 or more")
MIN_POOL_SIZE = 3
"""Two connections LISTEN for as long as a worker runs (new commits, key revocations): at
least one more is left for everything else."""


_pool_size = _at_least(MIN_POOL_SIZE, f"a pool size: a whole number of {MIN_POOL_SIZE} or more")
_process_count = _at_least(1, "a number of workers (1 or more)")


def _serve(args: argparse.Namespace) -> int:
    from titen.api.rest.connections import stop_on_signals

    settings = _settings(args)
    stop_on_signals()  # from here on, SIGTERM or Ctrl-C stops the server and it exits 0
    try:
        return _serve_until_stopped(args, settings)
    except KeyboardInterrupt:  # stopped while starting
        return 0


def _serve_until_stopped(args: argparse.Namespace, settings: ServerSettings) -> int:
    if settings.workers and settings.workers > 1:
        from titen.api.rest.prefork import serve_workers

        return serve_workers(args.database, settings, settings.workers)
    for name in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"):
        os.environ.pop(name, None)  # one process keeps its metrics in memory

    from titen.api.rest.logs import configure, default_format
    from titen.api.rest.server import announce, listeners, serve

    configure(settings.log_format or default_format())
    sock, metrics_sock = listeners(settings)
    with open_services(args, pool_size=settings.pool_size, announce=False) as opened:
        announce(opened.database.redacted(), settings, sock, metrics_sock)
        serve(opened, settings, sock, metrics_sock)
    return 0
