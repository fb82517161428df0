"""Pushing the committed log downstream (issue 13): webhooks and the NATS relay, in one run.

For each backend, on a fresh store (a temporary SQLite file, or a PostgreSQL schema dropped
afterwards), against a real `titen serve --allow-private-webhooks` and real receivers on
loopback (tests/receiver.py, one per subscription, answering 200 at once):

1. Commit-to-delivery latency: `--subscriptions` webhooks of every type, then `--events` leases
   acquired one at a time at `--rate` per second through the server. For each event and each
   subscription: when the receiver had read the delivery, measured from when the POST of the
   acquire was sent ("from sent": over-states the latency by the whole request, since the commit
   happens inside it), from the event's own `time` (taken by the command just before its
   transaction, millisecond resolution, the same clock: over-states by the transaction only),
   and from when its 201 came back ("from answered": under-states by the answer's way back).
   Target: p99 <= 100 ms for a healthy endpoint, judged from the event's time.
2. Deliveries per second, for each worker count of `--workers`: new subscriptions are made,
   the server is stopped, `--backlog` leases are acquired in-process (the application's own
   commands), and a server with `--webhook-workers N` is started on that store: every
   subscription drains its backlog at once, one event per POST, each attempt recorded. Timed
   from the first delivery received to the last (server start-up excluded); each event arrives
   once per subscription.
3. Relay publishes per second: `titen relay nats` on a new stream of the machine's NATS JetStream
   (`--nats`, the stream deleted afterwards) publishes the whole log of the store (everything the
   phases above committed), from the beginning, each waiting for JetStream's acknowledgement.
   Timed from the first message to the last by a core NATS subscriber on the stream's subjects;
   the stream then holds exactly that many messages (no duplicate, no gap).

Figures are throughputs and percentiles measured in one run, on a machine that may be shared.

    .venv/bin/python bench/webhooks.py [--backend sqlite|postgres|both] [--events 300] \
        [--rate 50] [--subscriptions 4] [--backlog 1000] [--workers 4] [--nats URL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acquire_timing import ms, store

from tests.receiver import Receiver
from tests.support import POSTGRES_URL, TITEN, Http, Server
from titen.service.bootstrap import bootstrap

ORG = "bench"
THREADS = 8


def lease(resource_id: str) -> dict:
    return {"resource_type": "bench", "resource_id": resource_id, "purpose": "p", "ttl_seconds": 60}


def serve(database: str, workers: int) -> Server:
    return Server(database, THREADS, "--allow-private-webhooks", "--webhook-workers", str(workers))


@contextlib.contextmanager
def receivers(count: int) -> Iterator[list[Receiver]]:
    """Receivers answering 200 at once."""
    opened = [Receiver() for _ in range(count)]
    try:
        yield opened
    finally:
        for receiver in opened:
            receiver.close()


def subscribe(http: Http, targets: list[Receiver]) -> None:
    for receiver in targets:
        status, body = http.request("POST", "/v1/webhooks", {"url": receiver.url})
        assert status == 201, body


def latency(database: str, key: str, args: argparse.Namespace) -> dict[str, str]:
    server = serve(database, args.workers[0])
    try:
        with receivers(args.subscriptions) as targets:
            http = Http(server.url, key)
            subscribe(http, targets)
            sent: dict[str, tuple[float, float]] = {}
            for i in range(args.events):
                before = time.time()
                status, body = http.request("POST", "/v1/leases", lease(f"latency-{i}"))
                after = time.time()
                assert status == 201, body
                sent[body["data"]["lease_id"]] = (before, after)
                time.sleep(max(0.0, 1 / args.rate - (after - before)))
            for receiver in targets:
                receiver.wait_for(args.events, timeout=60)
            arrivals = [
                (json.loads(r.body), r.at) for receiver in targets for r in receiver.received
            ]
    finally:
        server.stop()
    from_sent = [at - sent[event["data"]["lease_id"]][0] for event, at in arrivals]
    from_time = [at - instant(event["time"]) for event, at in arrivals]
    from_answered = [at - sent[event["data"]["lease_id"]][1] for event, at in arrivals]
    return {
        "delivered": f"{len(arrivals)}/{args.events * args.subscriptions}",
        "from sent p50/p99 ms": f"{ms(from_sent, 50)} / {ms(from_sent, 99)}",
        "from event time p50/p99 ms": f"{ms(from_time, 50)} / {ms(from_time, 99)}",
        "from answered p50/p99 ms": f"{ms(from_answered, 50)} / {ms(from_answered, 99)}",
        "target p99 <= 100 ms (from event time)": "met" if ms(from_time, 99) <= 100 else "MISSED",
    }


def instant(text: str) -> float:
    """An event's `time` (taken in the command, before its commit) as time.time() reads."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def throughput(database: str, key: str, workers: int, args: argparse.Namespace) -> float:
    """Deliveries per second while every subscription drains a backlog of its own."""
    with receivers(args.subscriptions) as targets:
        server = serve(database, workers)
        try:
            subscribe(Http(server.url, key), targets)
        finally:
            server.stop()
        commit(database, args.backlog)  # no server running: it waits for the next one
        server = serve(database, workers)
        try:
            for receiver in targets:
                receiver.wait_for(args.backlog, timeout=120)
        finally:
            server.stop()
        times = sorted(r.at for receiver in targets for r in receiver.received)
    assert len(times) == args.subscriptions * args.backlog, len(times)  # once each
    return (len(times) - 1) / (times[-1] - times[0])


def commit(database: str, count: int) -> None:
    """Acquire `count` new leases in-process, with the application's own commands."""
    services = bootstrap(database, pool_size=2)
    tag = uuid.uuid4().hex[:8]
    try:
        for i in range(count):
            services.app.acquire_lease(
                organization=ORG,
                holder="agent_bench",
                resource_type="bench",
                resource_id=f"backlog-{tag}-{i}",
                purpose="p",
                ttl_seconds=60,
            )
    finally:
        services.close()


def relay(database: str, url: str) -> dict[str, str]:
    """The relay publishing the whole log to a stream of its own; its rate, and what landed."""
    services = bootstrap(database, pool_size=2)
    try:
        published = 0
        after = 0
        while batch := services.event_log.tail(after, 1000):
            published += len(batch)
            after = batch[-1][1].position
    finally:
        services.close()
    name = f"BENCH{uuid.uuid4().hex[:10]}"
    return asyncio.run(_relay(database, url, name, published))


async def _relay(database: str, url: str, stream: str, expected: int) -> dict[str, str]:
    prefix = stream.lower()
    nc = await nats.connect(url)
    arrivals: list[float] = []
    done = asyncio.Event()

    async def on_message(_msg: object) -> None:
        arrivals.append(time.time())
        if len(arrivals) >= expected:
            done.set()

    await nc.subscribe(f"{prefix}.>", cb=on_message)
    process = await asyncio.create_subprocess_exec(
        TITEN,
        *("relay", "nats", "--database", database, "--url", url, "--stream", stream),
        *("--subject-prefix", prefix, "--name", stream),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await asyncio.wait_for(done.wait(), timeout=300)
        process.terminate()
        assert await process.wait() == 0
        js = nc.jetstream()
        stored = (await js.stream_info(stream)).state.messages
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        with contextlib.suppress(Exception):
            await nc.jetstream().delete_stream(stream)
        await nc.close()
    rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
    return {
        "published": f"{len(arrivals)}/{expected}",
        "in the stream": str(stored),
        "publishes/s": f"{rate:,.0f}",
    }


def load() -> str:
    """The machine's 1-minute load average before a measurement (2 cores: above 2 is queued)."""
    return f"(load {os.getloadavg()[0]:.1f})"


def run(backend: str, args: argparse.Namespace) -> None:
    with store(backend) as database:
        services = bootstrap(database, pool_size=2)
        key = services.keys.create(ORG, "agent_bench", "agent")
        services.close()
        print(f"\n== {backend}" + (f" ({POSTGRES_URL})" if backend == "postgres" else ""))
        workers = args.workers[0]
        busy = load()
        figures = latency(database, key, args)
        print(f"commit-to-delivery, {args.subscriptions} subscriptions, {workers} workers {busy}:")
        print("  " + ", ".join(f"{k}: {v}" for k, v in figures.items()))
        for count in args.workers:
            busy = load()
            rate = throughput(database, key, count, args)
            print(
                f"deliveries/s, {args.subscriptions} subscriptions x {args.backlog} waiting, "
                f"--webhook-workers {count} {busy}: {rate:,.0f}"
            )
        if not args.no_relay:
            busy = load()
            figures = relay(database, args.nats)
            print(f"relay {busy}: " + ", ".join(f"{k}: {v}" for k, v in figures.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--events", type=int, default=300, help="leases in the latency phase")
    parser.add_argument("--rate", type=float, default=50, help="commits per second (latency)")
    parser.add_argument("--subscriptions", type=int, default=4)
    parser.add_argument("--backlog", type=int, default=1000, help="events waiting (throughput)")
    parser.add_argument(
        "--workers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[4],
        help="--webhook-workers of the server; a list (1,2,4,8) measures throughput for each",
    )
    parser.add_argument("--nats", default="nats://127.0.0.1:4222", help="NATS with JetStream")
    parser.add_argument("--no-relay", action="store_true", help="skip the relay figure")
    args = parser.parse_args()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    print(f"titen at {subprocess.check_output(['git', 'rev-parse', '--short', 'HEAD'], text=True)}")
    for backend in backends:
        run(backend, args)


if __name__ == "__main__":
    main()
