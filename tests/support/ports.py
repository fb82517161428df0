"""Ports for the suite's servers, each pytest-xdist process from a share of its own."""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
from collections.abc import Iterator

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
