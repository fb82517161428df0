"""`titen serve`: the API under waitress, beside the background parts (service/background.py).
A stream or waiting long-poll holds a thread, so the pool is the request threads plus the
subscriber limit: subscribers never take the threads that serve leases and handoffs."""

from __future__ import annotations

import logging
import socket
from contextlib import ExitStack

from titen.api.rest.app import create_app
from titen.api.rest.budget import org_budget
from titen.api.rest.connections import Server, allow_open_files, listen
from titen.api.rest.metrics import serve_metrics
from titen.api.rest.settings import ServerSettings
from titen.service.background import serving
from titen.service.bootstrap import Services
from titen.service.budget import OrgBudget

log = logging.getLogger("titen.server")


def listeners(
    settings: ServerSettings, reuse_port: bool = False
) -> tuple[socket.socket, socket.socket | None]:
    """The API's listening socket and the metrics one, taken before anything starts. With
    `reuse_port` the API's is only bound, for workers that each listen on it, once a plain bind
    has shown nobody holds it (SO_REUSEPORT alone would join another server)."""
    if reuse_port:
        with listen(settings.host, settings.port, backlog=None) as free:
            port = free.getsockname()[1]
        sock = listen(settings.host, port, backlog=None, reuse_port=True)
    else:
        sock = listen(settings.host, settings.port)
    if settings.metrics_port is None:
        return sock, None
    try:
        return sock, listen(
            settings.metrics_host, settings.metrics_port, backlog=64, doing="serve metrics on"
        )
    except Exception:
        sock.close()
        raise


def announce(
    what: str,
    settings: ServerSettings,
    sock: socket.socket,
    metrics_sock: socket.socket | None,
) -> None:
    """Log where the server listens (as bound: --port 0 picks one), once per server."""
    if settings.cors_origins:
        log.info("CORS for pages from %s", ", ".join(settings.cors_origins))
    log.info("titen serving on http://%s:%d (database %s)", *sock.getsockname()[:2], what)
    if metrics_sock is not None:
        log.info("metrics on http://%s:%d/metrics", *metrics_sock.getsockname()[:2])


def serve(
    services: Services,
    settings: ServerSettings,
    sock: socket.socket,
    metrics_sock: socket.socket | None = None,
    budget: OrgBudget | None = None,
) -> None:
    """Serve until KeyboardInterrupt (Ctrl-C, SIGTERM), then stop in order: no new connections,
    then the threads. `budget`: the node's, when a parent of several workers made it."""
    threads = settings.threads + settings.max_subscribers
    files = allow_open_files(settings.connection_limit + threads + 100)
    if files < settings.connection_limit + threads:
        log.warning("only %d open files allowed: fewer connections than --connection-limit", files)
    app = create_app(services, settings, budget or org_budget(settings))
    with ExitStack() as stack:
        server = Server(app, settings, threads, sock)
        stack.callback(server.close)
        if metrics_sock is not None:
            metrics = serve_metrics(services.readiness, services.consumer_table, metrics_sock)
            stack.enter_context(metrics)  # its socket closed, once
            stack.callback(metrics.shutdown)  # it has stopped serving
        background = serving(
            services,
            webhook_workers=settings.webhook_workers,
            retry_seconds=settings.webhook_retry_seconds,
            allow_private=settings.allow_private_webhooks,
        )
        background.start()
        stack.callback(background.stop)
        server.run()
