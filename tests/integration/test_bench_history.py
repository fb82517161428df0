"""bench/history.py, the bench's in-process history loader, on a small scale: it drives the
domain's own commands, so a change to them must not leave it broken until the next bench run
(Lease came to need its `timestamp`, and the history cases failed at once)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from titen.service.bootstrap import bootstrap

BENCH = Path(__file__).resolve().parents[2] / "bench" / "history.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_history", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_loaders_write_the_history_the_bench_asks_for(database: str) -> None:
    history = load_bench()
    said: list[str] = []
    services = bootstrap(database, pool_size=2)
    try:
        common = {"organization": "bench", "holder": "agent_bench", "progress": said.append}
        history.load_long_history(services, resource_id="long", leases=30, batch=10, **common)
        history.load_unreleased(services, count=25, batch=10, **common)
        history.fill_events(services, until=200, batch=10, **common)
        history.project(services, said.append)
        assert history.event_count(services) >= 200
        unreleased = services.store.query("SELECT COUNT(*) AS n FROM {lease_index}")
        assert unreleased[0]["n"] == 25  # the long history's and the filler's are all released
    finally:
        services.close()
