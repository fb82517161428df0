"""Every flag `titen serve --help` documents starts the default server (its default number of
workers) on both backends: it answers /healthz and an acquire, and the flag takes effect where
that is cheap to see from outside.

One server per flag, several starting at once (fewer on PostgreSQL, whose connections the
suite shares); each is checked while it runs and stopped before the next batch starts, and
each flag's test reads its server's outcome.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.support import (
    STARTUP_BOUND,
    TITEN,
    EventStreamReader,
    Http,
    child_pids,
    create_key,
    eventually,
    free_port,
)
from titen.api.rest.settings import DEFAULT_WORKERS

ORIGIN = "http://app.example"
BATCH = {"sqlite": 6, "postgres": 3}
"""Servers started at once: a default server on PostgreSQL holds up to 2 x --pool-size
connections of the 100 the suite shares."""
GIVEN_TO_EVERY_SERVER = {"--database", "--host", "--port"}
METRICS = "METRICS_PORT"
"""Stands in a case's flags for a free port of the server's own (`Started.metrics_port`)."""


@dataclass
class Started:
    """A `titen serve` process with `flags`, on a free port, its stderr kept in a file."""

    flags: tuple[str, ...]
    database: str

    def __post_init__(self) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        self.flags = tuple(str(self.metrics_port) if f == METRICS else f for f in self.flags)
        self.url = f"http://127.0.0.1:{self.port}"
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        where = ("--host", "127.0.0.1", "--port", str(self.port), "--database", self.database)
        self.process = subprocess.Popen(
            [TITEN, "serve", *where, *self.flags],
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
        )

    def wait_healthy(self) -> None:
        eventually(self._healthy, "titen serve answering /healthz", STARTUP_BOUND, every=0.05)

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"titen serve exited {self.process.returncode}: {self.log()}")
        try:
            return Http(self.url).request("GET", "/healthz")[0] == 200
        except OSError:
            return False

    def log(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr.close()


Check = Callable[[Started, str], None]
"""What a flag changes, seen from outside: given the server and a key of organization acme."""


def serves(server: Started, key: str) -> None:
    """Nothing cheap to see beyond serving (the flag tunes a limit or a pace)."""


def cors(server: Started, key: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", "/healthz", headers={"Origin": ORIGIN})
        response = conn.getresponse()
        response.read()
    finally:
        conn.close()
    assert response.getheader("access-control-allow-origin") == ORIGIN


def metrics_at(host: str) -> Check:
    def check(server: Started, key: str) -> None:
        conn = http.client.HTTPConnection(host, server.metrics_port, timeout=30)
        try:
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            text = response.read().decode()
        finally:
            conn.close()
        assert response.status == 200
        assert "titen_" in text

    return check


def text_log(server: Started, key: str) -> None:
    log = server.log()
    assert "titen serving on" in log
    assert not any(line.startswith("{") for line in log.splitlines()), log


def org_rate(server: Started, key: str) -> None:
    """An organization past `--org-rate 1` (bursts of 2, one spent by the acquire) is told 429."""
    http = Http(server.url, key)
    answers = [http.request("GET", "/v1/handoffs") for _ in range(3)]
    refused = [body["error"]["code"] for status, body in answers if status == 429]
    assert refused and refused[0] == "TOO_MANY_REQUESTS", answers


def private_webhooks(server: Started, key: str) -> None:
    http = Http(server.url, key)
    status, body = http.request("POST", "/v1/webhooks", {"url": "http://127.0.0.1:9/hook"})
    assert status == 201, body


def head_timeout(server: Started, key: str) -> None:
    """Closed well before the default 10 s: an unfinished head is given 0.5 s."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        while sock.recv(4096):  # an answer, if any, then the end
            pass


def body_timeout(server: Started, key: str) -> None:
    """A body that stops coming is answered 408 well before the default 30 s: it is given 1 s."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/leases HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        answer = b""
        while chunk := sock.recv(4096):  # the answer, then the end
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 "), answer


def heartbeat(server: Started, key: str) -> None:
    """A quiet stream's first frame is a heartbeat, well before the default 15 s."""
    stream = EventStreamReader(server.url, key, timeout=5)
    try:
        assert stream.status == 200
        assert {"comment": "heartbeat"} in stream.frames()  # after acme's events so far
    finally:
        stream.close()


CASES: dict[str, tuple[tuple[str, ...], Check]] = {
    "--verbose": (("-v",), serves),
    "--workers": (("--workers", "3"), serves),  # its workers are counted as every server's
    "--threads": (("--threads", "4"), serves),
    "--pool-size": (("--pool-size", "3"), serves),
    "--max-subscribers": (("--max-subscribers", "8"), serves),
    "--max-subscribers-per-org": (("--max-subscribers-per-org", "4"), serves),
    "--max-subscribers-per-principal": (("--max-subscribers-per-principal", "2"), serves),
    "--request-head-timeout": (("--request-head-timeout", "0.5"), head_timeout),
    "--request-body-timeout": (("--request-body-timeout", "1"), body_timeout),
    "--connection-limit": (("--connection-limit", "64"), serves),
    "--org-rate": (("--org-rate", "1"), org_rate),
    "--heartbeat-seconds": (("--heartbeat-seconds", "0.3"), heartbeat),
    "--metrics-port": (("--metrics-port", METRICS), metrics_at("127.0.0.1")),
    "--metrics-host": (
        ("--metrics-port", METRICS, "--metrics-host", "127.0.0.2"),
        metrics_at("127.0.0.2"),
    ),
    "--log-format": (("--log-format", "text"), text_log),
    "--webhook-retry-seconds": (("--webhook-retry-seconds", "1,2,3"), serves),
    "--webhook-workers": (("--webhook-workers", "2"), serves),
    "--cors-origin": (("--cors-origin", ORIGIN), cors),
    "--allow-private-webhooks": (("--allow-private-webhooks",), private_webhooks),
}


def outcome(server: Started, check: Check, key: str, n: int, workers: int) -> str | None:
    """None if the server runs `workers` worker processes, served and the flag took effect,
    else what went wrong."""
    try:
        server.wait_healthy()
        pid = server.process.pid
        eventually(lambda: len(child_pids(pid)) == workers, f"{workers} worker processes")
        http = Http(server.url, key)
        acquire = {"resource_type": "deploy", "resource_id": f"r{n}", "purpose": "p"}
        status, body = http.request("POST", "/v1/leases", {**acquire, "ttl_seconds": 60})
        assert status == 201, (status, body)
        check(server, key)
    except (AssertionError, OSError) as failed:  # OSError: a timeout, a connection refused
        return f"{type(failed).__name__}: {failed}\n{server.log()}"
    return None


@pytest.fixture(scope="module")
def outcomes(module_database: str) -> Iterator[dict[str, str | None]]:
    """Each flag's server, started in batches and checked while it runs."""
    key = create_key(module_database, "acme", "agent_flags")
    backend = "sqlite" if module_database.startswith("sqlite") else "postgres"
    batch = BATCH[backend]
    names = list(CASES)
    found: dict[str, str | None] = {}
    started = time.monotonic()
    for first in range(0, len(names), batch):
        servers = {name: Started(CASES[name][0], module_database) for name in names[first:][:batch]}
        try:
            for n, (name, server) in enumerate(servers.items(), first):
                flags = server.flags
                workers = int(flags[flags.index("--workers") + 1]) if "--workers" in flags else 0
                found[name] = outcome(
                    server, CASES[name][1], key, n, workers or DEFAULT_WORKERS[backend]
                )
        finally:
            for server in servers.values():
                server.stop()
    print(f"{len(names)} servers on {backend} in {time.monotonic() - started:.1f} s")
    yield found


def test_every_documented_flag_has_a_case():
    from titen.api.cli.main import _parser

    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    serve = commands.choices["serve"]
    documented = {max(a.option_strings, key=len) for a in serve._actions} - {"--help"}
    assert documented == set(CASES) | GIVEN_TO_EVERY_SERVER


@pytest.mark.parametrize("flag", list(CASES))
def test_the_default_server_starts_and_serves_with(flag: str, outcomes: dict[str, str | None]):
    assert outcomes[flag] is None, outcomes[flag]
