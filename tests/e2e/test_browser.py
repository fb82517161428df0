"""A real browser follows the event log: headless Chromium runs a page from another origin that
opens an EventSource with a ticket, on both backends.

The page is served by the test itself (its own origin, which `titen serve --cors-origin` names)
and posts what it sees back to the same little server, in order: opens, errors with the
EventSource's `readyState`, and each event with its `lastEventId`. The API server is stopped and
started again on its port while events are committed through a second server, so the browser
reconnects on its own (to the URL it was opened with, `?after=latest` and all, plus
`Last-Event-ID`) and must get exactly the events it missed, none twice. Revoking the key ends
the stream, the reconnect is refused, and the EventSource closes for good.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support import Http, Server, chromium, chromium_path, create_key, free_port, titen
from titen.domain.published import PUBLISHED

CLOSED = 2  # EventSource.readyState once it has given up
PAGE = """<!doctype html>
<title>titen events</title>
<script>
let chain = Promise.resolve();
function report(seen) {  // one at a time, so they arrive in the order they happened
  chain = chain.then(() => fetch("/report", {method: "POST", body: JSON.stringify(seen)}))
    .catch(() => {});
}
const source = new EventSource("%(api)s/v1/events/stream?after=latest&ticket=%(ticket)s");
source.onopen = () => report({kind: "open"});
source.onerror = () => report({kind: "error", state: source.readyState});
for (const type of %(types)s) {
  source.addEventListener(type, (e) =>
    report({kind: "event", id: e.lastEventId, event: JSON.parse(e.data)}));
}
</script>
"""


class Page:
    """The page's own origin: serves the page, and collects what the page reports."""

    def __init__(self) -> None:
        self.html = b""
        self.reports: list[dict] = []
        self.changed = threading.Condition()
        page = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(page.html)))
                self.end_headers()
                self.wfile.write(page.html)

            def do_POST(self) -> None:
                seen = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with page.changed:
                    page.reports.append(seen)
                    page.changed.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, what: str, condition: Callable[[list[dict]], bool], timeout: float = 15) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: condition(self.reports), timeout):
                raise AssertionError(f"the page never reported {what}: {self.reports}")

    def events(self) -> list[dict]:
        return [r for r in self.reports if r["kind"] == "event"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def page() -> Iterator[Page]:
    page = Page()
    yield page
    page.close()


def open_in_chromium(url: str, profile: str) -> subprocess.Popen:
    return subprocess.Popen(
        chromium(profile, url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its helper processes end with it
    )


def test_a_browser_follows_the_log_with_a_ticket_across_a_restart_until_revocation(database, page):
    chromium_path()  # skipped (or failed, in CI) before any server starts: none is left running
    reader = create_key(database, "acme", "agent_reader", "dispatcher")  # reads the whole log
    writer = create_key(database, "acme", "agent_writer")
    port = free_port()
    options = ("--cors-origin", page.origin, "--heartbeat-seconds", "1")
    api = Server(database, 4, *options, port=port)
    other = Server(database, 4)  # commits while the API server is down
    try:
        status, body = Http(api.url, reader).request("POST", "/v1/events/tickets")
        assert status == 201, body
        types = json.dumps(list(PUBLISHED))
        page.html = (
            PAGE % {"api": api.url, "ticket": body["data"]["ticket"], "types": types}
        ).encode()

        def acquire(resource_id: str) -> None:
            lease = {"resource_type": "deploy", "resource_id": resource_id, "purpose": "p"}
            status, _ = Http(other.url, writer).request(
                "POST", "/v1/leases", {**lease, "ttl_seconds": 60}
            )
            assert status == 201

        def received() -> list[str]:
            return [e["event"]["data"]["resource_id"] for e in page.events()]

        with tempfile.TemporaryDirectory() as profile:
            browser = open_in_chromium(page.origin + "/", profile)
            try:
                page.wait("the stream open", lambda r: {"kind": "open"} in r, timeout=30)
                acquire("r0")
                acquire("r1")
                page.wait("two events", lambda r: received() == ["r0", "r1"])

                api.stop()  # the browser's connection drops; it keeps trying
                acquire("r2")
                acquire("r3")
                api = Server(database, 4, *options, port=port)
                page.wait("the missed events", lambda r: len(page.events()) >= 4)
                acquire("r4")
                page.wait("the next event", lambda r: len(page.events()) >= 5)
                assert received() == ["r0", "r1", "r2", "r3", "r4"]  # no gap, no duplicate
                assert [r["kind"] for r in page.reports].count("open") == 2

                titen(
                    "keys",
                    "revoke",
                    "--org",
                    "acme",
                    "--principal",
                    "agent_reader",
                    database=database,
                )
                page.wait(
                    "the EventSource closed", lambda r: {"kind": "error", "state": CLOSED} in r
                )
                acquire("r5")
                time.sleep(1.5)  # time to deliver r5 to an EventSource that were still open
            finally:
                os.killpg(browser.pid, signal.SIGKILL)
                browser.wait()
    finally:
        api.stop()  # the one running now: a new one after the restart
        other.stop()
    assert received() == ["r0", "r1", "r2", "r3", "r4"]
    cursors = [e["id"] for e in page.events()]
    assert cursors == [e["event"]["cursor"] for e in page.events()]
    assert len(set(cursors)) == 5
