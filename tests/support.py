"""Test doubles and helpers shared by every layer of the suite."""

from __future__ import annotations

import http.client
import itertools
import json as jsonlib
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

POSTGRES_URL = os.environ.get(
    "TITEN_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
TITEN = str(Path(sys.executable).with_name("titen"))
FIXTURES = Path(__file__).parent / "fixtures"
STARTUP_BOUND = 120  # seconds a test server may take to answer /healthz (Server._wait_healthy)
RELEASE_SCHEMAS = {
    # fixture (its folder and its files' stem): the schema its PostgreSQL dump names
    "previous_release": "titen_fixture_prev",  # before the `titen` namespace
    "before_inline": "titen_fixture_before_inline",  # before inline read models (b3ba8ee)
}


class FakeClock:
    """A clock that moves only when told, so tests cross an expiry without sleeping."""

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime(2026, 7, 30, 10, 48, 13, 829000, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)


def eventually(condition: Callable[[], object], what: str, timeout: float = 10) -> None:
    """Poll `condition` until it holds; fail naming `what` if it never does."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def postgres_reason() -> str | None:
    """Why PostgreSQL cannot be used here, or None when it can."""
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL unreachable at {POSTGRES_URL}: {exc}".strip()


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A database URL on a fresh schema of the test database, dropped afterwards."""
    schema = f"titen_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{POSTGRES_URL}?schema={schema}"
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def previous_release_store(backend: str, release: str = "previous_release") -> Iterator[str]:
    """A database URL on a fresh copy of the store an earlier release wrote (`backend` is
    "sqlite" or "postgres", `release` a key of RELEASE_SCHEMAS); what it holds is
    `previous_release_manifest(backend, release)`.

    The fixture itself is never opened: tests change what they open. The PostgreSQL dump names
    its schema in identifiers and inside a function body, so the copy replaces the name in the
    text (fixtures/previous_release/README.md) and runs it without psql's meta-commands.
    """
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            copy = shutil.copy(FIXTURES / release / f"{release}.db", directory)
            yield f"sqlite:///{copy}"
        return
    schema = f"titen_test_{uuid.uuid4().hex[:12]}"
    text = (FIXTURES / release / f"{release}.pg.sql").read_text()
    script = "\n".join(
        line
        for line in text.replace(RELEASE_SCHEMAS[release], schema).splitlines()
        if not line.startswith("\\")
    )
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(script)  # one script: the data are INSERT statements, not COPY
    try:
        yield f"{POSTGRES_URL}?schema={schema}"
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def previous_release_manifest(backend: str, release: str = "previous_release") -> dict:
    """What `previous_release_store(backend, release)` holds and how that release answered."""
    return jsonlib.loads((FIXTURES / release / f"manifest.{backend}.json").read_text())


def chromium_path() -> str:
    """The browser the browser tests drive; skipped without it, except in CI."""
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def chromium(profile: str | Path, *arguments: str) -> list[str]:
    """Headless Chromium's command line, as the browser tests run it, with a profile of its own."""
    return [
        chromium_path(),
        "--headless",
        "--no-sandbox",  # it runs as root here
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *arguments,
    ]


LISTENING_PORTS = range(26000, 32768)
"""Ports the suite's servers listen on: below the kernel's ephemeral range (32768 and up,
/proc/sys/net/ipv4/ip_local_port_range), from which the suite's own outgoing connections take
their local ports. A port the kernel handed out for a moment (bind to 0, close) and given to a
server could be taken first by such a connection, and the server failed to start ("the port is
already in use"). Above the cluster tests' fixed ports (256xx, tests/cluster)."""


def _own_ports() -> Iterator[int]:
    """This test process's share of LISTENING_PORTS, round and round from a random start.

    Each pytest-xdist process (gw0, gw1, ...; a replacement for a crashed one takes a share by
    its number, modulo) has a share of its own, so two never pick the same port at once; a run
    without xdist (the exclusive tests, after the others) has the whole range. The random start
    keeps another run on the machine (another checkout's suite, a bench) from following this
    one port for port.
    """
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    index = int(worker.removeprefix("gw")) % max(count, 1) if worker else 0
    size = len(LISTENING_PORTS) // max(count, 1)
    share = LISTENING_PORTS[index * size : (index + 1) * size]
    start = random.randrange(len(share))
    return itertools.cycle([*share[start:], *share[:start]])


_ports = _own_ports()
_picking = threading.Lock()


def free_port() -> int:
    """A port nothing listens on now, from this process's share, never one an outgoing
    connection can take meanwhile; one still held by an earlier test is passed over."""
    with _picking:
        for _ in LISTENING_PORTS:
            port = next(_ports)
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no free port in this test process's share")


def besides_database(stderr: str) -> str:
    """What a command wrote to stderr besides the line naming the database it opened."""
    lines = stderr.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("titen: database "))


def titen(
    *args: str, database: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real `titen` command line (`env` added to its environment); a failure checked
    for shows what the command said."""
    run = subprocess.run(
        [TITEN, *args, "--database", database],
        capture_output=True,
        text=True,
        timeout=60,
        env=None if env is None else {**os.environ, **env},
    )
    if check and run.returncode:
        raise AssertionError(f"titen {' '.join(args)} exited {run.returncode}:\n{run.stderr}")
    return run


def create_key(database: str, org: str, principal: str, role: str = "agent") -> str:
    """A key made as `titen keys create` makes it (its services, opened and closed again), in
    this process: the command's own start was a third of a second of CPU, paid by hundreds of
    tests whose point is not the command (tests/e2e/test_cli.py runs it)."""
    from titen.service.bootstrap import bootstrap  # the client's tests load no server code

    services = bootstrap(database, pool_size=2)
    try:
        return services.keys.create(org, principal, role)
    finally:
        services.close()


def acquire(services: Any, n: int, organization: str = "acme") -> None:
    """An in-process acquire of resource `r{n}` by agent_a of `organization`, for tests whose
    point is the commit it makes, not the lease (`services`: titen.service.bootstrap's)."""
    services.app.acquire_lease(
        organization=organization,
        holder="agent_a",
        resource_type="deploy",
        resource_id=f"r{n}",
        purpose="p",
        ttl_seconds=60,
    )


class Server:
    """A real `titen serve` process on a free port."""

    def __init__(
        self,
        database: str,
        threads: int = 8,
        *options: str,
        port: int = 0,
        own_group: bool = False,
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        prefix: tuple[str, ...] = (),
    ):
        """`own_group`: the server leads a process group of its own, as a shell job does, so
        that a test can send the group what a terminal sends on Ctrl-C. `env`: variables added
        to the server's environment (a faked clock, tests/e2e/test_clocks.py). `prefix` runs it
        through another command (`ip netns exec NS`: tests/cluster), listening on `host`."""
        self.database = database
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}"
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in stop/kill)
        self.log = ""
        self.process = subprocess.Popen(
            [
                *prefix,
                TITEN,
                "serve",
                "--host",
                host,
                "--port",
                str(self.port),
                "--threads",
                str(threads),
                "--database",
                database,
                # One process unless a test asks for workers: limits and counts are per process.
                *([] if "--workers" in options else ["--workers", "1"]),
                *options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            process_group=0 if own_group else None,
            env=None if env is None else {**os.environ, **env},
        )
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        # A bound for a hung start, not a pace: on 2 cores shared by the suite's processes (and
        # four servers starting at once in test_startup), a healthy start has taken over 30 s.
        deadline = time.monotonic() + STARTUP_BOUND
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._collect_log()
                raise RuntimeError(f"titen serve exited: {self.log}")
            try:
                if Http(self.url).request("GET", "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"titen serve did not become healthy in {STARTUP_BOUND} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._collect_log()

    def kill(self) -> None:
        """End the process without any chance to clean up, as a crash would."""
        self.process.kill()
        self.process.wait()
        self._collect_log()

    def log_so_far(self) -> str:
        """What the server has written to stderr until now, while it runs (read without moving
        the file's offset, which the server's processes write at)."""
        if self._log.closed:
            return self.log
        fd = self._log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def log_lines(self) -> list[dict]:
        """The JSON lines of `log_so_far` (a server started with --log-format json)."""
        return [
            jsonlib.loads(line) for line in self.log_so_far().splitlines() if line.startswith("{")
        ]

    def _collect_log(self) -> None:
        """Keep what the server wrote to stderr (its request log) as `self.log`."""
        if not self._log.closed:
            self._log.seek(0)
            self.log = self._log.read()
            self._log.close()


def child_pids(pid: int) -> set[int]:
    """The live processes whose parent is `pid` (zombies not counted: they serve nothing)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        state, parent = stat.rpartition(")")[2].split()[:2]
        if int(parent) == pid and state != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie, exited but not reaped, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


class Http:
    """A small JSON client over real HTTP, one connection per request (safe across threads)."""

    def __init__(self, base_url: str, key: str | None = None):
        self.host, _, port = base_url.removeprefix("http://").partition(":")
        self.port = int(port)
        self.key = key

    def request(
        self,
        method: str,
        path: str,
        json: object = None,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict | None]:
        headers = dict(headers or {})
        token = key or self.key
        if token:
            headers["authorization"] = f"Bearer {token}"
        body = None
        if json is not None:
            body = jsonlib.dumps(json)
            headers["content-type"] = "application/json"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        return response.status, jsonlib.loads(data) if data else None


class EventStreamReader:
    """Reads Server-Sent Events from a real server, frame by frame."""

    def __init__(
        self,
        base_url: str,
        key: str | None,
        query: str = "",
        last_event_id: str = "",
        timeout: float = 30,
    ):
        """`key` None sends no Authorization header (a ticket in `query` stands for it)."""
        host, _, port = base_url.removeprefix("http://").partition(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        if last_event_id:
            headers["last-event-id"] = last_event_id
        self.conn.request("GET", f"/v1/events/stream{query}", headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status

    def frames(self) -> Iterator[dict[str, str]]:
        """Each frame's fields (`id`, `event`, `data`, or `comment`), as they arrive."""
        frame: dict[str, str] = {}
        while line := self.response.readline():
            text = line.decode().rstrip("\n")
            if not text:
                if frame:
                    yield frame
                frame = {}
            elif text.startswith(":"):
                frame["comment"] = text[1:].strip()
            else:
                name, _, value = text.partition(": ")
                frame[name] = value

    def events(self, count: int) -> list[dict]:
        """The next `count` events (comments skipped), parsed from their data lines."""
        found = []
        for frame in self.frames():
            if "data" in frame:
                event = jsonlib.loads(frame["data"])
                assert frame["id"] == event["cursor"]
                found.append(event)
                if len(found) == count:
                    break
        return found

    def close(self) -> None:
        self.response.close()  # the response holds the socket too
        self.conn.close()


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
    metrics_port = int(server.process.args[server.process.args.index("--metrics-port") + 1])
    return sample(scrape(metrics_port), "titen_stream_subscribers")


class LongPoll(threading.Thread):
    """A long-poll (GET `path`, e.g. /v1/events?...&wait=30) waiting in the background; when it
    answered, and with what."""

    def __init__(self, base_url: str, path: str, key: str | None = None):
        super().__init__(daemon=True)
        self.http = Http(base_url, key)
        self.path = path
        self.answered_at = 0.0
        self.answer: tuple[int, dict | None] = (0, None)

    def run(self) -> None:
        self.answer = self.http.request("GET", self.path)
        self.answered_at = time.monotonic()


def read_http_request(sock: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP request off a raw socket: its head and its Content-Length body (for test
    servers that answer by hand); ConnectionError if the peer hangs up first."""

    def more() -> bytes:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the peer hung up mid-request")
        return chunk

    data = b""
    while b"\r\n\r\n" not in data:
        data += more()
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += more()
    return head, body
