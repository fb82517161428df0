"""What the request log and the metrics cost per request, as a ratio in one run.

The same Falcon app on the same SQLite store is called in-process through WSGI (no sockets and
no test client, so nothing but the application's own work is timed), once as `titen serve`
builds it (a JSON line per request written through `logging` to /dev/null, a Prometheus counter
and histogram per request) and once with those two middlewares replaced by nothing. Rounds
alternate between the two so that drift (caches, the store growing) falls on both alike; the
median round counts. CPU time of this process, per request.

Two routes: `GET /healthz` (the cheapest request there is, so the overhead's largest share) and
`POST /v1/leases` (a real command: an acquire of a fresh resource, committed to the store).

    .venv/bin/python bench/observability.py [--requests 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import falcon
import falcon.testing

import titen.api.rest.app as app_module
from titen.api.rest.app import create_app
from titen.api.rest.logs import JsonFormatter
from titen.service.bootstrap import bootstrap

Call = Callable[[int], None]


class Nothing:
    """A middleware that does nothing: stands in for the request log and the metrics."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        pass


def build(services: Any, observed: bool) -> falcon.App:
    """The app as served, or with the request log and metrics middlewares taken out."""
    if observed:
        return create_app(services)
    originals = app_module.RequestLog, app_module.RequestMetrics
    app_module.RequestLog = app_module.RequestMetrics = Nothing
    try:
        return create_app(services)
    finally:
        app_module.RequestLog, app_module.RequestMetrics = originals


def caller(app: falcon.App, method: str, path: str, body: Callable[[int], Any], headers: dict):
    """One request through WSGI; `body(n)` is the JSON body of the n-th call (None: none)."""

    def start_response(status: str, headers: list, exc_info: Any = None) -> None:
        pass

    def call(n: int) -> None:
        payload = body(n)
        environ = falcon.testing.create_environ(
            path,
            method=method,
            body=None if payload is None else json.dumps(payload),
            headers=headers,
        )
        for _ in app(environ, start_response):
            pass

    return call


def seconds_per_request(call: Call, start: int, requests: int) -> float:
    began = time.process_time()
    for n in range(start, start + requests):
        call(n)
    return (time.process_time() - began) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    sink = open("/dev/null", "w")  # noqa: SIM115 (open for the whole run)
    handler = logging.StreamHandler(sink)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    with tempfile.TemporaryDirectory() as directory:
        services = bootstrap(f"sqlite:///{directory}/titen.db")
        key = services.keys.create("acme", "agent_bench", "agent")
        json_headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}

        def lease(n: int) -> dict:
            return {"resource_type": "b", "resource_id": f"r{n}", "purpose": "b", "ttl_seconds": 60}

        routes = {
            "GET /healthz": ("GET", "/healthz", lambda n: None, {}),
            "POST /v1/leases": ("POST", "/v1/leases", lease, json_headers),
        }
        apps = {observed: build(services, observed) for observed in (False, True)}
        print(f"{args.rounds} rounds of {args.requests} requests; CPU time per request, median")
        made = 0
        for name, (method, path, body, headers) in routes.items():
            calls = {k: caller(app, method, path, body, headers) for k, app in apps.items()}
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.rounds):
                for observed in (False, True):
                    times[observed].append(
                        seconds_per_request(calls[observed], made, args.requests)
                    )
                    made += args.requests
            bare, observed = (statistics.median(times[k]) for k in (False, True))
            print(
                f"{name:16} without {bare * 1e6:7.1f} us   with log+metrics "
                f"{observed * 1e6:7.1f} us   +{(observed - bare) * 1e6:5.1f} us"
                f"   ratio x{observed / bare:.3f}"
            )
        services.close()


if __name__ == "__main__":
    main()
