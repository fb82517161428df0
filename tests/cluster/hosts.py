"""A node on a "host" of its own: a network namespace joined to the root one by a veth pair,
10.211.N.2 inside and 10.211.N.1 outside (where its database listens), so that a partition can
cut that node, and only it, from the database.

A partition is iptables dropping, inside the namespace, every packet to and from the database's
port: a black hole (nothing refused, nothing answered), while the node's own HTTP port stays
reachable from the test. Deleting the namespace removes its veth and its rules with it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

NETWORK = "10.211"
"""A private /16 that nothing on these machines uses; host N gets 10.211.N.0/24."""


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr}")
    return done


def why_not() -> str | None:
    """Why a namespaced host cannot be made here, or None when it can."""
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2 iptables)"
    probe = "titen_probe"
    made = run("ip", "netns", "add", probe, check=False)
    if made.returncode:
        return f"network namespaces are not available here: {made.stderr.strip()}"
    try:
        rules = run("ip", "netns", "exec", probe, "iptables", "-L", "-n", check=False)
        if rules.returncode:
            return f"iptables does not work in a namespace here: {rules.stderr.strip()}"
    finally:
        run("ip", "netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Host:
    name: str  # the namespace
    address: str  # the node's, inside
    gateway: str  # the root namespace's end: where the database listens

    @property
    def prefix(self) -> tuple[str, ...]:
        """Run a command on this host."""
        return ("ip", "netns", "exec", self.name)

    def partition(self, port: int) -> None:
        """Drop every packet between this host and `port` on the gateway, both ways."""
        for chain, direction in (("OUTPUT", "--dport"), ("INPUT", "--sport")):
            run(*self.prefix, "iptables", "-A", chain, "-p", "tcp", direction, str(port),
                "-j", "DROP")  # fmt: skip

    def heal(self) -> None:
        run(*self.prefix, "iptables", "-F")


@contextmanager
def namespaced_host(index: int) -> Iterator[Host]:
    """Host `index` (1-254), removed on the way out whatever happened."""
    name, outer, inner = f"titen_h{index}", f"tvh{index}a", f"tvh{index}b"
    host = Host(name, f"{NETWORK}.{index}.2", f"{NETWORK}.{index}.1")
    _remove(name, outer)  # left by a run that was killed
    try:
        run("ip", "netns", "add", name)
        run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        run("ip", "link", "set", inner, "netns", name)
        run("ip", "addr", "add", f"{host.gateway}/24", "dev", outer)
        run("ip", "link", "set", outer, "up")
        run("ip", "-n", name, "addr", "add", f"{host.address}/24", "dev", inner)
        run("ip", "-n", name, "link", "set", inner, "up")
        run("ip", "-n", name, "link", "set", "lo", "up")
        yield host
    finally:
        _remove(name, outer)


def _remove(name: str, outer: str) -> None:
    run("ip", "netns", "del", name, check=False)  # takes the inner end and its rules along
    run("ip", "link", "del", outer, check=False)
