"""Issue 16: open event streams must not slow every request.

Starts a real `titen serve` (one process) on a fresh store per backend and times acquires by
one keyed client (organization `acme`) over one kept-alive connection: first with no stream
open, then with `--streams` (64) Server-Sent Event streams open in other organizations (four
organizations of 16 streams, two principals of 8 each: the per-organization and per-principal
quotas' defaults), then again with none. Before each timed phase a short warm-up. The target:
the p50 with the streams open is within 1.2x of the p50 without (the mean of the two unloaded
phases). The issue's "before": 7 -> 49 ms on PostgreSQL, 2.3 -> 24.8 ms on SQLite.

    .venv/bin/python bench/streams.py [--backend sqlite|postgres|both] [--acquires 400]
        [--streams 64] [--same-org]

`--same-org` opens the streams in `acme` itself (each then also receives every event), with
the quotas raised to fit.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import threading

from acquire_timing import acquire_seconds, load, make_keys, phase, store

from tests.support import EventStreamReader, Server

PER_PRINCIPAL = 8


def measure(database: str, acquires: int, streams: int, same_org: bool) -> float:
    owners = [
        ("acme" if same_org else f"org{n // 16}", f"reader{n // PER_PRINCIPAL}", "dispatcher")
        for n in range(0, streams, PER_PRINCIPAL)
    ]
    key, *readers = make_keys(database, [("acme", "writer", "agent"), *owners])
    quotas = ["--max-subscribers-per-org", str(streams)] if same_org else []
    server = Server(database, 16, "--max-subscribers", str(max(streams, 1)), *quotas)
    try:
        acquire_seconds(server.port, key, 50, "warm0")
        before = phase("no stream", acquire_seconds(server.port, key, acquires, "before"))
        opened = [
            EventStreamReader(server.url, readers[n // PER_PRINCIPAL], query="?after=latest")
            for n in range(streams)
        ]
        assert {s.status for s in opened} <= {200}, [s.status for s in opened]
        drains = [threading.Thread(target=_drain, args=(s,), daemon=True) for s in opened]
        for drain in drains:
            drain.start()
        acquire_seconds(server.port, key, 50, "warm1")
        during = phase(
            f"{streams} streams open", acquire_seconds(server.port, key, acquires, "during")
        )
        for stream in opened:
            _hang_up(stream)
        for drain in drains:
            drain.join(timeout=10)
        acquire_seconds(server.port, key, 50, "warm2")
        after = phase("no stream again", acquire_seconds(server.port, key, acquires, "after"))
    finally:
        server.stop()
    ratio = during / ((before + after) / 2)
    verdict = "met" if ratio <= 1.2 else "MISSED"
    print(f"  ratio {ratio:.2f}x (target <= 1.2x: {verdict}); {load()}")
    return ratio


def _hang_up(stream: EventStreamReader) -> None:
    """Close the stream's connection at once: its reader thread, blocked until the next
    heartbeat, then returns (closing the response alone would wait for it)."""
    sock = stream.response.fp.raw._sock  # http.client gave the socket to the response
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _drain(stream: EventStreamReader) -> None:
    """Read what the stream sends, as a live reader would, until it is closed."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # hung up by the bench
        for _ in stream.frames():
            pass
    stream.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--acquires", type=int, default=400)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--same-org", action="store_true")
    args = parser.parse_args()
    print(load())
    for backend in ("sqlite", "postgres"):
        if args.backend in (backend, "both"):
            print(f"{backend}, one server process:")
            with store(backend) as database:
                measure(database, args.acquires, args.streams, args.same_org)


if __name__ == "__main__":
    main()
