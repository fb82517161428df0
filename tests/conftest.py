"""Fixtures shared by every layer: each test that takes `database` runs on SQLite and on
PostgreSQL; `services`, `client` (falcon.testing, in-process) and `key` build on it.

Layers: tests/unit (no I/O), tests/integration (real databases), tests/api (the REST app
in-process), tests/e2e (real `titen` processes, marked `slow`: `pytest -m "not slow"` skips them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import falcon.testing
import pytest

from tests.support import (
    RELEASE_SCHEMAS,
    FakeClock,
    postgres_reason,
    postgres_schema,
    previous_release_manifest,
    previous_release_store,
)
from titen.api.rest.app import create_app
from titen.service.bootstrap import Services, bootstrap

BACKENDS = ["sqlite", "postgres"]
E2E = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that runs real processes is `slow`."""
    for item in items:
        if E2E in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)


def skip_or_fail_without_postgres() -> None:
    reason = postgres_reason()
    if reason is None:
        return
    if os.environ.get("TITEN_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"TITEN_REQUIRE_POSTGRES=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A fresh, empty database URL for each test, on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/titen.db"
        return
    skip_or_fail_without_postgres()
    with postgres_schema() as url:
        yield url


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL schema, for what only PostgreSQL can show (several processes)."""
    skip_or_fail_without_postgres()
    with postgres_schema() as url:
        yield url


@pytest.fixture(params=BACKENDS)
def previous_release(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict]]:
    """A copy of the store the previous release wrote, on each backend, and its manifest."""
    if request.param == "postgres":
        skip_or_fail_without_postgres()
    with previous_release_store(request.param) as url:
        yield url, previous_release_manifest(request.param)


@pytest.fixture(params=[(r, b) for r in RELEASE_SCHEMAS for b in BACKENDS], ids="-".join)
def earlier_release(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, dict]]:
    """A copy of a store each earlier release in tests/fixtures wrote, on each backend: the
    release's name, the store's URL and its manifest."""
    release, backend = request.param
    if backend == "postgres":
        skip_or_fail_without_postgres()
    with previous_release_store(backend, release) as url:
        yield release, url, previous_release_manifest(backend, release)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def services(database: str, clock: FakeClock) -> Iterator[Services]:
    services = bootstrap(database, clock, pool_size=20)
    yield services
    services.close()


@pytest.fixture
def client(services: Services) -> falcon.testing.TestClient:
    return falcon.testing.TestClient(create_app(services))


@pytest.fixture
def key(services: Services) -> Callable[..., str]:
    """Make a key: key("acme", "agent_a") or key("acme", "ops", role="operator")."""

    def make(org: str, principal: str, role: str = "agent") -> str:
        return services.keys.create(org, principal, role)

    return make
