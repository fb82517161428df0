"""The servers the e2e tests run against: `serve` starts any number, `server` one on the test's
database, `module_server` one a module's tests share; flags come from a `server` mark.

    pytestmark = pytest.mark.server("--heartbeat-seconds", "0.3", threads=4, metrics=True)

A mark on a test overrides its module's. `metrics=True` adds `--metrics-port` on a free port
(`Server.metrics_port`); other keywords go to `Server` (`env`, `own_group`, ...).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support import Server, child_pids, create_key, eventually, free_port
from tests.tcp_proxy import TcpProxy


def start(
    database: str, *flags: str, threads: int = 8, metrics: bool = False, **more: Any
) -> Server:
    """`titen serve` on `database` with `flags` (Server's arguments otherwise), returned once
    every one of its `--workers` runs."""
    if metrics:
        flags = (*flags, "--metrics-port", str(free_port()))
    server = Server(database, threads, *flags, **more)
    workers = int(flags[flags.index("--workers") + 1]) if "--workers" in flags else 1
    try:
        if workers > 1:
            eventually(lambda: len(child_pids(server.process.pid)) == workers, "every worker")
    except AssertionError:
        server.stop()
        raise
    return server


def marked(node: pytest.Item | pytest.Collector) -> tuple[tuple, dict]:
    """The flags and keywords of the `server` mark closest to `node`, or none."""
    mark = node.get_closest_marker("server")
    return (mark.args, mark.kwargs) if mark is not None else ((), {})


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    """Start servers as `start` does, `serve(database, *flags, threads=4, ...)`; each is stopped
    after the test."""
    started: list[Server] = []

    def serving(database: str, *flags: str, **settings: Any) -> Server:
        started.append(start(database, *flags, **settings))
        return started[-1]

    yield serving
    for server in started:
        server.stop()


@pytest.fixture
def server(request: pytest.FixtureRequest, database: str, serve: Callable[..., Server]) -> Server:
    """A server on the test's fresh database (each backend), started with the marked flags."""
    flags, settings = marked(request.node)
    return serve(database, *flags, **settings)


@pytest.fixture(scope="module")
def module_server(request: pytest.FixtureRequest, module_database: str) -> Iterator[Server]:
    """One server for a module's tests (each backend), started with the module's marked flags:
    each test keeps to an organization of its own (`own_key`)."""
    flags, settings = marked(request.node)
    server = start(module_database, *flags, **settings)
    yield server
    server.stop()


@pytest.fixture
def own_key(module_server: Server) -> str:
    """A key of agent_a in an organization no other test uses, on the module's server."""
    return create_key(module_server.database, f"acme_{uuid.uuid4().hex[:8]}", "agent_a")


@pytest.fixture
def proxied(postgres_database: str) -> Iterator[tuple[TcpProxy, str]]:
    """A TCP proxy to PostgreSQL the test can cut, and the test's database URL through it."""
    host = postgres_database.split("@", 1)[1].split("/", 1)[0]
    proxy = TcpProxy(_address(host))
    yield proxy, postgres_database.replace(f"@{host}/", f"@127.0.0.1:{proxy.port}/", 1)
    proxy.close()


def _address(host: str) -> tuple[str, int]:
    """The (host, port) of a URL's `HOST[:PORT]`, PostgreSQL's port when none is given."""
    name, _, port = host.partition(":")
    return name, int(port or 5432)
