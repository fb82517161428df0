"""What a server shows Prometheus, on a listener of its own (`titen serve --metrics-port`).
Labels are bounded and name no organization, principal or id. The log's position and lags are
read from the database at each scrape; with several workers, whichever accepts a scrape answers
the sum of all (prometheus-client's multiprocess mode)."""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import falcon
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler, make_wsgi_app
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from titen.api.rest.logs import route
from titen.api.rest.settings import MULTIPROC_ENV
from titen.service.consumer_table import ConsumerTable
from titen.service.readiness import Readiness
from titen.service.relay_names import KIND as RELAY
from titen.service.relay_names import relay_name
from titen.service.webhooks import KIND as WEBHOOK

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

HTTP_REQUESTS = Counter(
    "titen_http_requests", "HTTP requests answered.", ["method", "route", "status"]
)
HTTP_DURATION = Histogram(
    "titen_http_request_duration_seconds",
    "Time from the request reaching the application to its answer.",
    ["method", "route"],
)
SUBSCRIBERS = Gauge(
    "titen_stream_subscribers",
    "Open event streams and waiting long-polls.",
    multiprocess_mode="livesum",  # with several workers: the sum over the running ones
)


class RequestMetrics:
    """Falcon middleware: counts and times every answered request from its start (`RequestLog`)."""

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        method = req.method if req.method in METHODS else "OTHER"
        template = route(req)
        _counted(method, template, resp.status_code).inc()
        _timed(method, template).observe(time.perf_counter() - req.context.started)


# Each label set's series, kept: `labels()` checks and locks on every call (the sets are bounded).
_counted = functools.cache(HTTP_REQUESTS.labels)
_timed = functools.cache(HTTP_DURATION.labels)


class StoreCollector:
    """Scrape-time gauges from the database."""

    def __init__(self, readiness: Readiness, consumer_table: ConsumerTable):
        self.readiness = readiness
        self.consumer_table = consumer_table

    def collect(self) -> Iterator[Metric]:
        report = self.readiness.check()
        up = 1 if report.database == "ok" else 0
        yield _gauge("titen_database_up", "1 when the database answered this scrape, else 0.", up)
        if report.log_position is None:
            return
        yield _gauge(
            "titen_event_log_position",
            "The newest committed position of the event log.",
            report.log_position,
        )
        yield _gauge(
            "titen_projection_lag_events",
            "Log positions committed but not yet applied to a read model.",
            {name: state.lag for name, state in report.projections.items()},
            "projection",
        )
        broken = {failure.projection for failure in report.failures}
        yield _gauge(
            "titen_projection_failed",
            "1 while a read model has a recorded failure on an event (see /readyz), else 0.",
            {name: 1 if name in broken else 0 for name in report.projections},
            "projection",
        )
        yield _gauge(
            "titen_webhook_backlog_events",
            "Published events after the positions of all webhook subscriptions, summed (events "
            "their filters will skip included).",
            sum(self.consumer_table.backlog(WEBHOOK).values()),
        )
        relays = self.consumer_table.backlog(RELAY).items()
        yield _gauge(
            "titen_relay_lag_events",
            "Published events not yet relayed, by relay name (`titen relay nats --name`).",
            {relay_name(consumer): waiting for consumer, waiting in relays},
            "name",
        )


def _gauge(
    name: str, documentation: str, values: float | dict[str, float], label: str = ""
) -> GaugeMetricFamily:
    """A gauge of one value, or of one value per `label` value."""
    if not isinstance(values, dict):
        return GaugeMetricFamily(name, documentation, value=values)
    gauge = GaugeMetricFamily(name, documentation, labels=[label])
    for labelled, value in values.items():
        gauge.add_metric([labelled], value)
    return gauge


def serve_metrics(
    readiness: Readiness, consumer_table: ConsumerTable, sock: socket.socket
) -> ThreadingWSGIServer:
    """Serve /metrics on `sock` (listening already) in a thread; the server, to stop and close."""
    sock.setblocking(False)  # workers that lose the race to accept go back to waiting
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get(MULTIPROC_ENV):
        MultiProcessCollector(registry)  # registers itself: every worker's series, summed
    else:
        registry.register(REGISTRY)  # a registry collects as a collector does
    registry.register(StoreCollector(readiness, consumer_table))
    server = ThreadingWSGIServer(sock.getsockname()[:2], _SilentHandler, bind_and_activate=False)
    server.socket.close()  # the one it made, never bound
    server.socket = sock
    server.server_name, server.server_port = sock.getsockname()[:2]
    server.setup_environ()
    server.set_app(make_wsgi_app(registry))
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
