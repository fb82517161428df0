"""Issue 16: connections without a key must not lock keyed clients out.

Starts a real `titen serve` (one process) on a fresh store per backend and times acquires by
one keyed client over one kept-alive connection: first with no other connection, then with
`--connections` (2,000) unauthenticated connections open, half of them idle (nothing sent) and
half trickling a request head one header line every 5 s, then again with none. The target:
every acquire is served, with a p50 within 5x of the p50 without them (the mean of the two
unloaded phases). Waitress's loop visited every open connection on each pass; the server's own
loop asks only those that may have changed (docs/security.md, api/rest/connections.py).

The server runs with `--request-head-timeout` set to `--head-timeout` (600 s), so that all the
connections stay open for the whole phase: the worst case for the loop. With the default (10 s)
the server closes each of them 10 s after it opened, and an attacker must keep reconnecting.

    .venv/bin/python bench/slow_connections.py [--backend sqlite|postgres|both]
        [--acquires 400] [--connections 2000] [--head-timeout 600]
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import socket
import threading

from acquire_timing import acquire_seconds, load, make_keys, phase, store

from tests.support import Server

TRICKLE_SECONDS = 5.0


def measure(database: str, acquires: int, connections: int, head_timeout: float) -> float:
    (key,) = make_keys(database, [("acme", "agent_a", "agent")])
    server = Server(database, 16, "--request-head-timeout", str(head_timeout))
    try:
        acquire_seconds(server.port, key, 50, "warm0")
        before = phase("no other connection", acquire_seconds(server.port, key, acquires, "b"))
        opened = [
            socket.create_connection(("127.0.0.1", server.port), timeout=10)
            for _ in range(connections)
        ]
        stop = threading.Event()
        trickler = threading.Thread(target=_trickle, args=(opened[: connections // 2], stop))
        trickler.start()
        try:
            acquire_seconds(server.port, key, 50, "warm1")
            during = phase(
                f"{connections} connections open (half idle, half trickling)",
                acquire_seconds(server.port, key, acquires, "during"),
            )
        finally:
            stop.set()
            trickler.join()
            for sock in opened:
                sock.close()
        acquire_seconds(server.port, key, 50, "warm2")
        after = phase("none again", acquire_seconds(server.port, key, acquires, "after"))
    finally:
        server.stop()
    ratio = during / ((before + after) / 2)
    verdict = "met" if ratio <= 5 else "MISSED"
    print(f"  ratio {ratio:.2f}x (target <= 5x: {verdict}); {load()}")
    return ratio


def _trickle(sockets: list[socket.socket], stop: threading.Event) -> None:
    """Start a request head on each socket, then send one more header line to each every
    TRICKLE_SECONDS, spread evenly over that time."""
    for sock in sockets:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    pause = TRICKLE_SECONDS / max(len(sockets), 1)
    while not stop.is_set():
        for sock in sockets:
            if stop.wait(pause):
                return
            with contextlib.suppress(OSError):  # closed by the server
                sock.sendall(b"X-Slow: 1\r\n")


def allow_open_files(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--acquires", type=int, default=400)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--head-timeout", type=float, default=600)
    args = parser.parse_args()
    allow_open_files(args.connections + 256)
    print(load())
    for backend in ("sqlite", "postgres"):
        if args.backend in (backend, "both"):
            print(f"{backend}, one server process:")
            with store(backend) as database:
                measure(database, args.acquires, args.connections, args.head_timeout)


if __name__ == "__main__":
    main()
