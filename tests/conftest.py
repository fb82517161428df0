"""Fixtures shared by every layer: each test that takes `database` runs on SQLite and on
PostgreSQL; `services`, `client` (falcon.testing, in-process) and `key` build on it.

Layers: tests/unit (no I/O), tests/integration (real databases), tests/api (the REST app
in-process), tests/e2e (real `titen` processes, marked `slow`: `pytest -m "not slow"` skips them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import falcon.testing
import pytest
from hypothesis import settings

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

# Hypothesis times each example against a deadline (200 ms by default): on 2 cores shared by
# the suite's processes that timed the machine's load, not the code (test_paging failed so).
settings.register_profile("titen", deadline=None)
settings.load_profile("titen")

BACKENDS = ["sqlite", "postgres"]
E2E = Path(__file__).parent / "e2e"
CLUSTER = Path(__file__).parent / "cluster"


# Modules whose PostgreSQL tests hold the most connections at once: four servers started
# together (test_startup), three servers (test_lease_races), --workers 2 (test_workers,
# test_fault_soak and test_fault_soak_beside_the_log, whose backends are also terminated and
# reopened over and over). A test server process holds at most 5 (the lazy pool,
# `--pool-size`); these run one at a time, so with the other xdist workers' tests (at most two
# single-process servers each) the suite stays well under PostgreSQL's stock max_connections
# of 100.
MANY_CONNECTIONS = {
    "test_fault_soak",
    "test_fault_soak_beside_the_log",
    "test_lease_races",
    "test_serve_flags",
    "test_startup",
    "test_workers",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that runs real processes is `slow`; those of tests/cluster are `cluster`
    too. The PostgreSQL tests of MANY_CONNECTIONS
    share one xdist group: `make test` (--dist loadgroup) runs them one at a time, so its
    workers together stay under PostgreSQL's stock max_connections of 100. The other tests
    that share a module's fixture share a group too (`sharing_group`)."""
    for item in items:
        path = Path(item.fspath)
        if CLUSTER in path.parents:  # clusters of their own: one test at a time, on 2 cores
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.xdist_group("cluster"))
        if E2E in path.parents:
            item.add_marker(pytest.mark.slow)
            if path.stem in MANY_CONNECTIONS and on_postgres(item):
                item.add_marker(pytest.mark.xdist_group("many_connections"))
        group = sharing_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(tryfirst=True)  # before pytest's, which read the parametrize marks
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked `backends("sqlite")` opens its `database` or `module_database` on those
    backends only: a parametrize mark of its own, which takes the fixture's place."""
    mark = metafunc.definition.get_closest_marker("backends")
    if mark is None:
        return
    for name, scope in (("database", "function"), ("module_database", "module")):
        if name in metafunc.fixturenames:
            only = pytest.mark.parametrize(name, mark.args, indirect=True, scope=scope)
            metafunc.definition.add_marker(only)


def pytest_collection_finish(session: pytest.Session) -> None:
    """In an xdist worker under `--dist loadgroup`, stop if a group did not reach the test's
    id, which is all the scheduler reads: the groups were once silently ignored (this file's
    hook ran after xdist's, and pytest 9.2 no longer reads the id xdist sets), and
    many_connections is PostgreSQL's connection budget."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    for item in session.items:
        group = item.get_closest_marker("xdist_group")
        if group is not None and not item.nodeid.endswith(f"@{group.args[0]}"):
            raise pytest.UsageError(f"xdist group {group.args[0]} not in the id {item.nodeid}")


def sharing_group(item: pytest.Item) -> str | None:
    """The xdist group of the tests that share this one's module-scoped fixtures (the servers
    a module starts once, per backend), or None. Spread over the xdist workers one test at a
    time, each worker that ran any of them started the module's servers again (up to four times
    per backend: about a minute of CPU in `make test`)."""
    definitions = item._fixtureinfo.name2fixturedefs
    shared = sorted(name for name, defs in definitions.items() if defs[-1].scope == "module")
    if not shared:
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    instance = "-".join(str(params[name]) for name in shared if name in params)
    return f"{item.nodeid.split('::')[0]}[{instance}]"


def on_postgres(item: pytest.Item) -> bool:
    """Whether the test opens a PostgreSQL database (its own fixture, or a backend parameter)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return "postgres_database" in item.fixturenames or "postgres" in params.values()


def skip_or_fail_without_postgres() -> None:
    reason = postgres_reason()
    if reason is None:
        return
    if os.environ.get("TITEN_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"TITEN_REQUIRE_POSTGRES=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL for each test, on each backend."""
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture(scope="module", params=BACKENDS)
def module_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh, empty database URL shared by a module's tests, on each backend: for a server
    the module starts once, its tests isolated by organizations of their own."""
    with fresh_database(request.param, tmp_path_factory.mktemp("module")) as url:
        yield url


@contextmanager
def fresh_database(backend: str, folder: Path) -> Iterator[str]:
    """An empty database: a SQLite file in `folder`, or a PostgreSQL schema dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{folder}/titen.db"
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
    services = bootstrap(database, clock, pool_size=4)  # opened at once: 4 per test, 8 at most
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
