"""`titen serve`: the API under waitress, with a follower waking subscribers on every commit.

Each open event stream or waiting long-poll holds a waitress worker thread while it waits, so
the pool is sized as the request threads plus the subscriber limit: subscribers can never take
the threads that serve leases and handoffs, and past the limit a subscriber is told 503.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from titen.api.rest.app import create_app
from titen.api.rest.connections import CannotListen, Server, allow_open_files, listen
from titen.api.rest.metrics import serve_metrics
from titen.api.rest.settings import ServerSettings
from titen.domain.webhooks import RetrySchedule
from titen.projections.follower import Follower
from titen.service.bootstrap import Services
from titen.service.delivery import Doorbell, Workers
from titen.service.targets import Targets
from titen.service.webhook_sender import WebhookSender

log = logging.getLogger("titen.server")


def serve(services: Services, settings: ServerSettings) -> None:
    """Take the ports, then start the background work, then say so and serve until stopped.

    The ports are taken first, so that one in use is refused (CannotListen) before anything
    starts and before the log says the server is serving.
    """
    threads = settings.threads + settings.max_subscribers
    files = allow_open_files(settings.connection_limit + threads + 100)
    if files < settings.connection_limit + threads:
        log.warning("only %d open files allowed: fewer connections than --connection-limit", files)
    server = listen(create_app(services, settings), settings, threads)
    try:
        stop_metrics = _metrics(services, settings)
        try:
            _run(services, settings, server)
        finally:
            stop_metrics()
    finally:
        server.close()


def _metrics(services: Services, settings: ServerSettings) -> Callable[[], None]:
    """Serve /metrics if asked to; returns how to stop it."""
    if settings.metrics_port is None:
        return lambda: None
    try:
        stop = serve_metrics(
            services.readiness, services.delivery, settings.metrics_host, settings.metrics_port
        )
    except OSError as exc:
        raise CannotListen(
            f"cannot serve metrics on {settings.metrics_host}:{settings.metrics_port}: "
            f"{exc.strerror or exc}"
        ) from None
    log.info("metrics on http://%s:%d/metrics", settings.metrics_host, settings.metrics_port)
    return stop


def _run(services: Services, settings: ServerSettings, server: Server) -> None:
    follower = Follower(services.app.recorder, services.recent_events)
    services.app.on_commit.append(follower.nudge)
    follower.start()
    services.revocations.start()
    doorbell = Doorbell()
    services.app.on_commit.append(doorbell.ring)
    follower.on_notify.append(doorbell.ring)
    webhooks = _webhook_workers(services, settings, doorbell)
    webhooks.start()
    if settings.cors_origins:
        log.info("CORS for pages from %s", ", ".join(settings.cors_origins))
    log.info(
        "titen serving on http://%s:%d (database %s)",
        settings.host,
        settings.port,
        services.database.redacted(),
    )
    try:
        server.run()
    finally:
        services.revocations.stop()
        webhooks.stop()
        follower.stop()


def _webhook_workers(services: Services, settings: ServerSettings, doorbell: Doorbell) -> Workers:
    """The threads that deliver webhooks from this process, woken by every commit."""
    sender = WebhookSender(
        services.webhooks,
        Targets(settings.allow_private_webhooks),
        RetrySchedule(settings.webhook_retry_seconds),
        services.clock,
    )
    return Workers(services.delivery, sender, doorbell, settings.webhook_workers)
