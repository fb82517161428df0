"""A real server's Prometheus metrics, read as a scraper reads them."""

from __future__ import annotations

import http.client

from tests.support.server import Server


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """A real server's /metrics, parsed by prometheus-client: {(sample name, labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        assert response.status == 200
        text = response.read().decode()
    finally:
        conn.close()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(metrics: dict, metric: str, /, **labels: str) -> float:
    """One sample's value, 0 when the series is not there yet."""
    return metrics.get((metric, frozenset(labels.items())), 0.0)


def subscriptions_held(server: Server) -> float:
    """How many streams and waiting long-polls the server holds open, from its metrics (it
    was started with `--metrics-port`)."""
    return sample(scrape(server.metrics_port), "titen_stream_subscribers")
