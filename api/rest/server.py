"""`titen serve`: the API under waitress, with a follower waking subscribers on every commit.

Each open event stream or waiting long-poll holds a waitress worker thread while it waits, so
the pool is sized as the request threads plus the subscriber limit: subscribers can never take
the threads that serve leases and handoffs, and past the limit a subscriber is told 503.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

from titen.api.rest.app import create_app
from titen.api.rest.balance import Share
from titen.api.rest.budget import OrgBudget, org_budget
from titen.api.rest.connections import Server, allow_open_files, listen
from titen.api.rest.metrics import serve_metrics
from titen.api.rest.settings import ServerSettings
from titen.domain.webhooks import RetrySchedule
from titen.projections.follower import Follower
from titen.service.application import CommitListener
from titen.service.bootstrap import Services
from titen.service.doorbell import Doorbell
from titen.service.targets import Targets
from titen.service.webhook_sender import WebhookSender
from titen.service.workers import Workers

log = logging.getLogger("titen.server")


def listeners(settings: ServerSettings) -> tuple[socket.socket, socket.socket | None]:
    """The API's listening socket and the metrics one (None unless --metrics-port), taken
    before the store is opened, so that a port in use is refused (CannotListen) before anything
    starts and before the log says the server is serving."""
    sock = listen(settings.host, settings.port)
    if settings.metrics_port is None:
        return sock, None
    try:
        metrics = listen(
            settings.metrics_host, settings.metrics_port, backlog=64, doing="serve metrics on"
        )
    except Exception:
        sock.close()
        raise
    return sock, metrics


def announce(
    what: str,
    settings: ServerSettings,
    sock: socket.socket,
    metrics_sock: socket.socket | None,
) -> None:
    """Log where the server listens (the ports as bound: --port 0 picks one), once per server
    however many workers it has."""
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
    share: Share | None = None,
    budget: OrgBudget | None = None,
) -> None:
    """Serve on the listening `sock` (and /metrics on `metrics_sock`) until KeyboardInterrupt
    (Ctrl-C, or SIGTERM: api/rest/signals.py), then stop in order: no new connections, then
    the threads; the caller closes the store. A worker of several accepts its `share` of the
    connections (api/rest/balance.py), and counts requests against the node's `budget`
    (api/rest/budget.py), which the parent made before forking it."""
    threads = settings.threads + settings.max_subscribers
    files = allow_open_files(settings.connection_limit + threads + 100)
    if files < settings.connection_limit + threads:
        log.warning("only %d open files allowed: fewer connections than --connection-limit", files)
    budget = budget or org_budget(settings)  # one process's own, unless a parent made one
    server = Server(create_app(services, settings, budget), settings, threads, sock, share)
    try:
        stop_metrics = _metrics(services, metrics_sock)
        try:
            _run(services, settings, server)
        finally:
            stop_metrics()
    finally:
        server.close()


def _metrics(services: Services, metrics_sock: socket.socket | None) -> Callable[[], None]:
    """Serve /metrics if asked to; returns how to stop it."""
    if metrics_sock is None:
        return lambda: None
    return serve_metrics(services.readiness, services.consumer_table, metrics_sock)


def _run(services: Services, settings: ServerSettings, server: Server) -> None:
    presence = services.webhook_presence
    # Other processes' commits reach the doorbell through the follower's NOTIFY, needed only
    # while a webhook is enabled; a commit of this process rings it only then, too.
    follower = Follower(services.app.recorder, services.recent_events, needed=presence.enabled)
    presence.on_enabled.append(follower.wake)
    services.app.on_commit.append(follower.nudge)
    follower.start()
    services.revocations.start()
    doorbell = Doorbell()
    services.app.on_commit.append(ring_while(presence.enabled, doorbell))
    follower.on_notify.append(doorbell.ring)
    webhooks = _webhook_workers(services, settings, doorbell)
    webhooks.start()
    try:
        server.run()
    finally:
        services.revocations.stop()
        webhooks.stop()
        follower.stop()


def ring_while(enabled: Callable[[], bool], doorbell: Doorbell) -> CommitListener:
    """A commit listener that rings the doorbell only while a webhook is enabled: a commit
    with nothing to deliver wakes no delivery worker."""

    def ring(position: int, organizations: frozenset[str]) -> None:
        if enabled():
            doorbell.ring()

    return ring


def _webhook_workers(services: Services, settings: ServerSettings, doorbell: Doorbell) -> Workers:
    """The threads that deliver webhooks from this process, woken by every commit."""
    sender = WebhookSender(
        services.webhooks,
        Targets(settings.allow_private_webhooks),
        RetrySchedule(settings.webhook_retry_seconds),
        services.clock,
    )
    presence = services.webhook_presence
    presence.on_enabled.append(doorbell.ring_all)  # idle workers sleep while there is none
    return Workers(
        services.delivery, sender, doorbell, settings.webhook_workers, wanted=presence.enabled
    )
