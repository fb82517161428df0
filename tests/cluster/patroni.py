"""Patroni with etcd, as operators run it: two PostgreSQL 15 members in strict synchronous mode.

Built from the distribution's packages (`patroni`, `etcd-server`): one etcd, and one Patroni per
member, each started as the postgres user in a process group of its own and kept by its PID.
Timings are small so that a failover takes seconds (`TTL`, `LOOP_WAIT`). A crash of a member's
node kills its Patroni and its postmaster together (`Member.crash`); the backends, each in a
process group of its own, are found by their working directory, inside the member's folder.
Everything is removed on the way out of `patroni_pair`, whatever happened. Root only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.cluster.replication import VERSION, wait_for

ROOT = Path("/var/lib/postgresql/titen_patroni")
TTL = 8
"""The leader key's time to live: a crashed leader's node is replaced after about this."""
LOOP_WAIT = 1
RETRY_TIMEOUT = 3
TOOLS = ("patroni", "patronictl", "etcd")
LEADS = ("master", "primary")
"""The role a leader's REST API names (Patroni 3.0 says "master")."""


def why_not() -> str | None:
    """Why Patroni cannot be run here (besides tests/cluster's own needs), or None."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} missing: apt-get install -y patroni etcd-server"
    return None


@dataclass
class Member:
    name: str
    port: int
    api_port: int
    folder: Path
    process: subprocess.Popen | None = None

    @property
    def config(self) -> Path:
        return self.folder / "patroni.yml"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/test"

    def start(self) -> None:
        log = open(self.folder / "patroni.log", "a")  # noqa: SIM115 (the child keeps it)
        self.process = subprocess.Popen(
            ["patroni", str(self.config)],
            user="postgres",
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.folder,
        )
        log.close()

    def crash(self) -> None:
        """Its node dies: Patroni and its postmaster are killed together, then its backends."""
        postmaster = self._postmaster()
        if self.process is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
            self.process = None
        if postmaster is not None:
            with suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGKILL)
        _kill_inside(self.folder)

    def role(self) -> str | None:
        """What Patroni's REST API says this member is ("leader", "sync_standby", ...)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.api_port}/patroni", timeout=2
            ) as answer:
                status = json.load(answer)
        except OSError:
            return None
        return status.get("role")

    def _postmaster(self) -> int | None:
        with suppress(OSError, ValueError):
            return int((self.folder / "data" / "postmaster.pid").read_text().split()[0])
        return None


@dataclass
class PatroniPair:
    members: list[Member]
    etcd: subprocess.Popen

    def url(self) -> str:
        """The multi-host URL of both members, for titen."""
        hosts = ",".join(f"127.0.0.1:{m.port}" for m in self.members)
        return f"postgresql://postgres@{hosts}/test?target_session_attrs=read-write"

    def leader(self) -> Member:
        found: list[Member] = []
        wait_for(
            lambda: found.extend(m for m in self.members if m.role() in LEADS) or found,
            "a leader",
        )
        return found[0]

    def other(self, member: Member) -> Member:
        return next(m for m in self.members if m is not member)

    def healthy(self) -> bool:
        """A leader and a synchronous standby streaming from it."""
        cluster = self.cluster()
        roles = sorted(m.get("role", "") for m in cluster)
        states = {m.get("state") for m in cluster}
        return roles == ["leader", "sync_standby"] and states <= {"running", "streaming"}

    def sync_standby(self) -> Member:
        names = [m["name"] for m in self.cluster() if m.get("role") == "sync_standby"]
        return next(m for m in self.members if m.name in names)

    def wait_healthy(self, timeout: float = 90) -> None:
        wait_for(self.healthy, "a leader and its synchronous standby", timeout)

    def cluster(self) -> list[dict[str, Any]]:
        for member in self.members:
            with (
                suppress(OSError, ValueError),
                urllib.request.urlopen(
                    f"http://127.0.0.1:{member.api_port}/cluster", timeout=2
                ) as answer,
            ):
                return list(json.load(answer)["members"])
        return []

    def switchover(self) -> None:
        """A planned switchover to the standby, as an operator asks for it."""
        leader = self.leader()
        subprocess.run(
            [
                "patronictl", "-c", str(leader.config), "switchover", "--force",
                "--master", leader.name, "--candidate", self.other(leader).name,
            ],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip


@contextmanager
def patroni_pair(port: int) -> Iterator[PatroniPair]:
    """etcd on `port + 200` (peers `port + 201`), members on `port` and `port + 1` (their REST
    APIs on `port + 2400` and `port + 2401`), with a database `test` on the leader."""
    folder = ROOT / str(port)
    _remove(folder)
    folder.mkdir(parents=True)
    shutil.chown(ROOT, "postgres", "postgres")
    shutil.chown(folder, "postgres", "postgres")
    etcd = _etcd(folder, port + 200, port + 201)
    members = [Member(f"m{i}", port + i, port + 2400 + i, folder / f"m{i}") for i in range(2)]
    pair = PatroniPair(members, etcd)
    try:
        wait_for(lambda: _etcd_healthy(port + 200), "etcd answers")
        for member in members:
            member.folder.mkdir(mode=0o700)
            shutil.chown(member.folder, "postgres", "postgres")
            _configure(member, f"titen{port}", port + 200)
            member.start()
        pair.wait_healthy()
        with psycopg.connect(
            pair.leader().url.replace("/test", "/postgres"), autocommit=True, connect_timeout=3
        ) as conn:
            conn.execute("CREATE DATABASE test")
        yield pair
    finally:
        for member in members:
            member.crash()
        with suppress(ProcessLookupError):
            os.killpg(etcd.pid, signal.SIGKILL)
        etcd.wait(30)
        _remove(folder)
        with suppress(OSError):  # not while another pair uses it
            ROOT.rmdir()


def _etcd(folder: Path, client: int, peer: int) -> subprocess.Popen:
    log = open(folder / "etcd.log", "w")  # noqa: SIM115 (the child keeps it)
    process = subprocess.Popen(
        [
            "etcd", "--name", "e1", "--data-dir", str(folder / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"e1=http://127.0.0.1:{peer}",
        ],
        start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    return process


def _etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
            return json.load(answer).get("health") == "true"
    except OSError:
        return False


def _configure(member: Member, scope: str, etcd: int) -> None:
    """The member's YAML (written as JSON, which YAML reads), as docs/deployment.md shows it."""
    trusted = [
        "local all all trust",
        "host all all 127.0.0.1/32 trust",
        "host replication all 127.0.0.1/32 trust",
    ]
    config = {
        "scope": scope,
        "name": member.name,
        "restapi": {
            "listen": f"127.0.0.1:{member.api_port}",
            "connect_address": f"127.0.0.1:{member.api_port}",
        },
        "etcd3": {"hosts": f"127.0.0.1:{etcd}"},
        "bootstrap": {
            "dcs": {
                "ttl": TTL,
                "loop_wait": LOOP_WAIT,
                "retry_timeout": RETRY_TIMEOUT,
                "synchronous_mode": True,
                "synchronous_mode_strict": True,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {"wal_log_hints": "on", "fsync": "off"},
                },
            },
            "pg_hba": trusted,
        },
        "postgresql": {
            "listen": f"127.0.0.1:{member.port}",
            "connect_address": f"127.0.0.1:{member.port}",
            "data_dir": str(member.folder / "data"),
            "bin_dir": f"/usr/lib/postgresql/{VERSION}/bin",
            "pgpass": str(member.folder / "pgpass"),
            "authentication": {
                "superuser": {"username": "postgres"},
                "replication": {"username": "postgres"},
            },
            "parameters": {"unix_socket_directories": str(member.folder)},
            "pg_hba": trusted,
        },
    }
    member.config.write_text(json.dumps(config, indent=1))
    shutil.chown(member.config, "postgres", "postgres")


def _kill_inside(folder: Path) -> None:
    """SIGKILL every process whose working directory is inside `folder` (a member's backends,
    each in a process group of its own, survive their postmaster for a moment)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with suppress(OSError):
            if Path(os.readlink(proc / "cwd")).is_relative_to(folder):
                os.kill(int(proc.name), signal.SIGKILL)


def _remove(folder: Path) -> None:
    _kill_inside(folder)
    deadline = time.monotonic() + 10
    while folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{folder} could not be removed")
