"""`titen relay nats` against a real NATS JetStream: order, subjects, de-duplication, a kill
between JetStream's acknowledgement and the saved position, SIGTERM, and a NATS restart.

The machine's NATS server (127.0.0.1:4222, started by .ci/run) with a stream of each test's own;
the restart test runs a NATS server of its own, so restarting it disturbs nobody else."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import nats
import pytest

from tests.support import TITEN, Server, eventually, free_port, sample, scrape
from titen.service.bootstrap import Services
from titen.service.relay import KILL_AFTER_ACKS
from titen.service.relay_names import consumer_name

NATS_URL = "nats://127.0.0.1:4222"
NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


def nats_reason(url: str = NATS_URL) -> str | None:
    async def probe() -> None:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=0)
        await nc.close()

    try:
        asyncio.run(probe())
    except Exception as exc:
        return f"NATS unreachable at {url}: {exc}"
    return None


@pytest.fixture
def stream() -> Iterator[str]:
    reason = nats_reason()
    if reason:
        if os.environ.get("TITEN_REQUIRE_NATS") == "1":  # CI: .ci/run starts NATS
            pytest.fail(f"TITEN_REQUIRE_NATS=1 but {reason}")
        pytest.skip(reason)
    name = f"T{uuid.uuid4().hex[:12]}"
    yield name
    asyncio.run(_delete_stream(NATS_URL, name))


async def _delete_stream(url: str, name: str) -> None:
    nc = await nats.connect(url)
    with suppress(Exception):  # never made, when the test failed early
        await nc.jetstream().delete_stream(name)
    await nc.close()


def messages(stream: str, url: str = NATS_URL) -> list[tuple[str, dict, dict]]:
    """Every message in the stream, in stream order: subject, headers, body."""

    async def read() -> list[tuple[str, dict, dict]]:
        nc = await nats.connect(url)
        js = nc.jetstream()
        try:
            info = await js.stream_info(stream)
        except Exception:
            await nc.close()
            return []
        found = []
        if not info.state.messages:
            await nc.close()
            return found
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(stream, seq)
            found.append((msg.subject, dict(msg.headers or {}), json.loads(msg.data)))
        await nc.close()
        return found

    return asyncio.run(read())


@contextmanager
def relay(database: str, stream: str, *options: str, url: str = NATS_URL, env: dict | None = None):
    process = subprocess.Popen(
        [
            TITEN,
            "relay",
            "nats",
            "--database",
            database,
            "--url",
            url,
            "--stream",
            stream,
            "--subject-prefix",
            f"p{stream.lower()}",
            *options,
        ],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stderr.close()


def acquire(services: Services, organization: str, resource_id: str) -> None:
    services.app.acquire_lease(
        organization=organization,
        holder="agent_a",
        resource_type="deploy",
        resource_id=resource_id,
        purpose="p",
        ttl_seconds=60,
    )


def test_every_organization_in_log_order_with_escaped_subjects(database, services, stream):
    organizations = ["acme", "we.ird*>org", "acme"]
    for i in range(9):
        acquire(services, organizations[i % 3], f"r{i}")
    with relay(database, stream) as process:
        eventually(lambda: len(messages(stream)) >= 9, "9 published", timeout=30)
        acquire(services, "acme", "live")  # committed while it runs
        eventually(lambda: len(messages(stream)) >= 10, "the live one published", timeout=30)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    published = messages(stream)
    log = [e for _, e in services.event_log.tail(0, 100)]
    assert [body["id"] for _, _, body in published] == [e.event["id"] for e in log]
    prefix = f"p{stream.lower()}"
    for (subject, headers, body), event in zip(published, log, strict=True):
        assert headers["Nats-Msg-Id"] == body["id"]
        assert body == event.served()
        organization = body["source"].removeprefix("/titen/organizations/")
        escaped = "we%2Eird%2A%3Eorg" if organization != "acme" else "acme"
        assert subject == f"{prefix}.{escaped}.lease.acquired"
    saved = services.consumer_table.consumers([consumer_name("default")])[consumer_name("default")]
    assert saved.position == log[-1].position  # saved on SIGTERM


def test_a_kill_between_ack_and_saving_resumes_with_no_gap_and_no_duplicate(
    database, services, stream
):
    for i in range(10):
        acquire(services, "acme", f"r{i}")
    with relay(database, stream, env={KILL_AFTER_ACKS: "4"}) as process:
        assert process.wait(timeout=30) == -signal.SIGKILL
    assert len(messages(stream)) == 4
    position = services.consumer_table.consumers([consumer_name("default")])
    assert position[consumer_name("default")].position == 0  # acknowledged, never saved
    with relay(database, stream):  # takes over once the dead relay's claim runs out
        eventually(lambda: len(messages(stream)) >= 10, "the rest published", timeout=40)
        acquire(services, "acme", "r10")  # published once the relay has gone past the rest
        eventually(lambda: len(messages(stream)) >= 11, "one more published", timeout=40)
    ids = [body["id"] for _, _, body in messages(stream)]
    assert ids == [e.event["id"] for _, e in services.event_log.tail(0, 100)]  # once each


def failures(services: Services, name: str = "default") -> int:
    """The failed attempts the relay `name` has recorded at the event at its head."""
    return services.consumer_table.consumers([consumer_name(name)])[consumer_name(name)].failures


def test_the_relay_rides_out_a_nats_restart(database, services, stream):
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    store = tempfile.mkdtemp()
    command = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", store]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        eventually(lambda: nats_reason(url) is None, "private NATS up", timeout=10)
        acquire(services, "acme", "before")
        with relay(database, stream, url=url) as process:
            eventually(lambda: len(messages(stream, url)) == 1, "published", timeout=30)
            server.terminate()
            server.wait(timeout=10)
            for i in range(3):
                acquire(services, "acme", f"during{i}")
            eventually(lambda: failures(services) > 0, "the relay failing, retrying", 30)
            server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            eventually(lambda: len(messages(stream, url)) == 4, "published after", timeout=40)
            assert process.poll() is None
        ids = [body["id"] for _, _, body in messages(stream, url)]
        assert ids == [e.event["id"] for _, e in services.event_log.tail(0, 100)]
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(store, ignore_errors=True)


def test_metrics_show_each_relay_lag_until_it_catches_up(database, services, stream):
    port = free_port()
    server = Server(database, 2, "--metrics-port", str(port))
    try:
        for n in range(3):
            acquire(services, "acme", f"lag-{n}")
        services.consumer_table.ensure(consumer_name("idle"), "relay", None, 0)  # never ran
        assert sample(scrape(port), "titen_relay_lag_events", name="idle") == 3
        with relay(database, stream, "--name", "busy"):
            eventually(
                lambda: (
                    ("titen_relay_lag_events", frozenset({("name", "busy")})) in scrape(port)
                    and sample(scrape(port), "titen_relay_lag_events", name="busy") == 0
                ),
                "the relay caught up",
            )
        assert sample(scrape(port), "titen_relay_lag_events", name="idle") == 3
    finally:
        server.stop()
