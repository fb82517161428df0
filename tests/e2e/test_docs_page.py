"""GET /docs in a real browser requests nothing from another host.

Headless Chromium opens the page from a real `titen serve` and writes its network log
(`--log-net-log`); every request the page made (initiated by its origin, as opposed to the
browser's own traffic: updates, autofill) must go to the server itself. The page must also have
run: it fetched /openapi.json and Redoc rendered the operations.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support import Server, chromium

START_JOB = "URL_REQUEST_START_JOB"


def requests_of_the_page(net_log: Path, origin: str) -> list[str]:
    """The URLs of every request the page from `origin` made, in the order they started."""
    log = json.loads(net_log.read_text())
    start_job = log["constants"]["logEventTypes"][START_JOB]
    urls = []
    for entry in log["events"]:
        params = entry.get("params", {})
        if entry["type"] == start_job and params.get("initiator") == origin:
            urls.append(params["url"])
    return urls


def test_the_docs_page_requests_nothing_from_another_host(tmp_path):
    server = Server(f"sqlite:///{tmp_path}/titen.db", 4)
    net_log = tmp_path / "net-log.json"
    try:
        shown = subprocess.run(
            chromium(
                tmp_path / "profile",
                "--disable-background-networking",
                f"--log-net-log={net_log}",
                "--virtual-time-budget=30000",  # the page's own time to load and render
                "--dump-dom",
                f"{server.url}/docs",
            ),
            capture_output=True,
            text=True,
            timeout=180,
            check=True,
        )
    finally:
        server.stop()
    requested = requests_of_the_page(net_log, server.url)
    assert f"{server.url}/openapi.json" in requested  # Redoc ran and fetched the contract
    assert [url for url in requested if not url.startswith(server.url + "/")] == []
    assert 'href="#operation/acquireLease"' in shown.stdout  # and rendered it
