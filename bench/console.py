"""The console with many rows, in Chromium: 10,000 held leases, then 100 events a second.

A store is filled with held leases in-process (real acquires, one commit each), then a real
`titen serve` and headless Chromium (Selenium over Debian's chromium-driver) open /console with
an operator's key. Measured in the page: the time from Open to the first page of leases drawn,
to the next page (Older), the longest task the main thread ran meanwhile and while the page is
scrolled (Long Tasks API: over 50 ms is a frame the user sees frozen), and, while acquires are
made over HTTP at a steady rate, the delay from each acquire's answer to its row in the tail.

    .venv/bin/python bench/console.py                     # 10,000 leases, 100 acquires/s for 10 s
    .venv/bin/python bench/console.py --leases 2000 --rate 50 --seconds 5
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from selenium.webdriver.common.by import By

from tests.e2e.console_driver import chrome, wait
from tests.support import Http, Server
from titen.service.bootstrap import bootstrap

LONG_TASKS = """
window.longest = 0;
new PerformanceObserver((list) => {
  for (const task of list.getEntries()) window.longest = Math.max(window.longest, task.duration);
}).observe({type: "longtask", buffered: true});
"""
NEWEST = (
    "const row = document.querySelector('#events .tail li .about'); return row && row.textContent;"
)
ROWS = "return document.querySelectorAll('#leases tbody tr').length;"
FIRST_ROW = "return document.querySelector('#leases tbody tr').dataset.leaseId;"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=100, help="acquires per second, live")
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    print(f"load average {' '.join(f'{n:.2f}' for n in os.getloadavg())} at the start")
    with tempfile.TemporaryDirectory() as tmp:
        database = f"sqlite:///{Path(tmp) / 'bench.db'}"
        key, agent = fill(database, args.leases)
        server = Server(database, 16)
        try:
            with chrome() as driver:
                measure(driver, server, key, agent, args)
        finally:
            server.stop()
    print(f"load average {' '.join(f'{n:.2f}' for n in os.getloadavg())} at the end")
    return 0


def fill(database: str, count: int) -> tuple[str, str]:
    services = bootstrap(database, pool_size=2)
    try:
        started = time.perf_counter()
        for n in range(count):
            services.app.acquire_lease(
                organization="acme",
                holder=f"agent_{n % 20}",
                resource_type="bench",
                resource_id=f"held-{n}",
                purpose="held for the bench",
                ttl_seconds=86_400,
            )
        print(f"filled {count} held leases in {time.perf_counter() - started:.1f} s")
        return (
            services.keys.create("acme", "ops", "operator"),
            services.keys.create("acme", "agent_live", "agent"),
        )
    finally:
        services.close()


def measure(driver, server: Server, key: str, agent: str, args: argparse.Namespace) -> None:
    driver.get(f"{server.url}/console")
    driver.execute_script(LONG_TASKS)
    started = time.perf_counter()
    open_console_here(driver, key)
    wait(driver, "the first page", lambda: driver.execute_script(ROWS) == 100, 60)
    first = time.perf_counter() - started
    status = driver.find_element(By.ID, "stream-status")
    wait(driver, "the stream", lambda: status.text.startswith("Live"), 30)
    started = time.perf_counter()
    before = driver.execute_script(
        "return document.querySelector('#leases tbody tr').dataset.leaseId"
    )
    driver.find_element(By.ID, "leases-next").click()
    wait(
        driver,
        "the next page",
        lambda: (
            driver.execute_script(
                "return document.querySelector('#leases tbody tr').dataset.leaseId"
            )
            != before
        ),
        60,
    )
    older = time.perf_counter() - started
    for _ in range(20):
        driver.execute_script("window.scrollBy(0, 400)")
        time.sleep(0.05)
    drawing = driver.execute_script("return window.longest")
    print(
        f"leases: first page of 100 drawn {first * 1000:.0f} ms after Open; next page "
        f"{older * 1000:.0f} ms; longest main-thread task {drawing:.0f} ms"
    )
    driver.execute_script("window.longest = 0")
    lags = live(driver, server, agent, args.rate, args.seconds)
    busiest = driver.execute_script("return window.longest")
    kept = driver.execute_script("return document.querySelectorAll('#events .tail li').length")
    print(
        f"tail at {args.rate:.0f} acquires/s for {args.seconds:.0f} s: {len(lags)} seen, "
        f"{kept} rows shown; answer to row p50 {statistics.median(lags) * 1000:.0f} ms, "
        f"p99 {quantile(lags, 0.99) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms; "
        f"longest main-thread task {busiest:.0f} ms"
    )


def open_console_here(driver, key: str) -> None:
    """Open on the page already loaded, so the long-task observer set on it stays."""
    driver.find_element(By.ID, "api-key").send_keys(key)
    driver.find_element(By.XPATH, "//button[normalize-space()='Open']").click()


def live(driver, server: Server, agent: str, rate: float, seconds: float) -> list[float]:
    """Acquire at `rate` for `seconds`; for each, how long from its answer to its tail row."""
    answered: dict[str, float] = {}
    seen: dict[str, float] = {}
    done = threading.Event()

    def acquire() -> None:
        http = Http(server.url, agent)
        start = time.perf_counter()
        for n in range(int(rate * seconds)):
            time.sleep(max(0.0, start + n / rate - time.perf_counter()))
            body = {"resource_type": "live", "resource_id": f"l{n}", "purpose": "p"}
            status, _ = http.request("POST", "/v1/leases", {**body, "ttl_seconds": 60})
            assert status == 201
            answered[f"live/l{n} by agent_live"] = time.perf_counter()
        done.set()

    writer = threading.Thread(target=acquire)
    writer.start()
    while not done.is_set() or len(seen) < len(answered):
        newest = driver.execute_script(NEWEST)
        now = time.perf_counter()
        if newest and newest not in seen:
            seen[newest] = now
        if done.is_set() and time.perf_counter() - answered[max(answered, key=answered.get)] > 5:
            break
    writer.join()
    return [seen[row] - answered[row] for row in seen if row in answered]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


if __name__ == "__main__":
    sys.exit(main())
