"""A real PostgreSQL primary and its synchronous streaming standby, built with Debian's tools.

`pg_createcluster` makes both; the standby's data folder is then replaced by the primary's
copy (`pg_basebackup -R`, which also points it at the primary); once the standby streams, the
primary is told to wait for it on every commit (`synchronous_standby_names = '*'`; set
before the standby exists, the primary's own `createdb` would wait for ever). Both clusters
are dropped on the way out of `replicated_pair`, whatever happened. Root only (the tools
switch to `postgres`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import psycopg

VERSION = "15"
CONF = "/etc/postgresql/" + VERSION
DATA = "/var/lib/postgresql/" + VERSION
TOOLS = ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster", "pg_basebackup", "runuser")
READY_SECONDS = 60
"""A bound for a cluster to start or a standby to catch up (on 2 busy cores), not a pace."""


def why_not() -> str | None:
    """Why a replicated pair cannot be built here, or None when it can."""
    if os.geteuid() != 0:
        return "building PostgreSQL clusters needs root (pg_createcluster, runuser)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing or not os.path.isdir(f"/usr/lib/postgresql/{VERSION}"):
        return f"PostgreSQL {VERSION}'s Debian tools are missing: {', '.join(missing) or 'server'}"
    return None


@dataclass
class Cluster:
    name: str
    port: int
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/test"

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=True, connect_timeout=3)

    def ctl(self, *args: str) -> None:
        run("pg_ctlcluster", VERSION, self.name, *args)

    def crash(self) -> None:
        """Stop at once, as a power cut would (no shutdown checkpoint, clients cut)."""
        self.ctl("stop", "-m", "immediate")

    def promote(self) -> None:
        self.ctl("promote")
        wait_for(lambda: self.scalar("SELECT NOT pg_is_in_recovery()"), f"{self.name} promoted")

    def scalar(self, query: str) -> object:
        with self.connect() as conn:
            row = conn.execute(query).fetchone()
        return row[0] if row else None


@dataclass
class Pair:
    primary: Cluster
    standby: Cluster

    def url(self, schema: str = "") -> str:
        """The multi-host URL of both, primary first, for titen."""
        hosts = ",".join(f"{c.host}:{c.port}" for c in (self.primary, self.standby))
        query = "target_session_attrs=read-write" + (f"&schema={schema}" if schema else "")
        return f"postgresql://postgres@{hosts}/test?{query}"


def run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr}")


def wait_for(condition, what: str, timeout: float = READY_SECONDS) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        with suppress(psycopg.Error):
            if condition():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.1)


def drop(name: str) -> None:
    """Stop and delete a cluster, and any data folder a half-built one left."""
    if os.path.isdir(f"{CONF}/{name}"):
        subprocess.run(
            ["pg_dropcluster", "--stop", VERSION, name], capture_output=True, timeout=120
        )
    shutil.rmtree(f"{DATA}/{name}", ignore_errors=True)


def _configure(name: str, listen: str, clients: str) -> None:
    with open(f"{CONF}/{name}/conf.d/titen-cluster.conf", "w") as conf:
        # fsync off: a crash here is of the processes, and the page cache survives it.
        conf.write(f"listen_addresses = '{listen}'\nfsync = off\n")
    with open(f"{CONF}/{name}/pg_hba.conf", "a") as hba:
        hba.write(f"host replication all 127.0.0.1/32 trust\nhost all all {clients} trust\n")


def _create(cluster: Cluster, listen: str, clients: str) -> None:
    """A new cluster on its port, started, with a database `test`."""
    run("pg_createcluster", VERSION, cluster.name, "-p", str(cluster.port), "--", "--auth=trust")
    _configure(cluster.name, listen, clients)
    cluster.ctl("start")
    run(
        "runuser", "-u", "postgres", "--",
        "createdb", "-h", "127.0.0.1", "-p", str(cluster.port), "test",
    )  # fmt: skip


@contextmanager
def single_cluster(
    port: int, listen: str = "127.0.0.1", clients: str = "127.0.0.1/32"
) -> Iterator[Cluster]:
    """One cluster on `port`, listening on `listen` for the `clients` (CIDR) besides
    loopback; dropped on the way out."""
    cluster = Cluster(f"titen_c{port}", port)
    drop(cluster.name)  # left by a run that was killed
    try:
        _create(cluster, listen, clients)
        yield cluster
    finally:
        drop(cluster.name)


@contextmanager
def replicated_pair(port: int) -> Iterator[Pair]:
    """A primary on `port` and its synchronous standby on `port + 1`, on loopback."""
    standby = Cluster(f"titen_c{port + 1}", port + 1)
    drop(standby.name)
    try:
        with single_cluster(port) as primary:
            run(
                "pg_createcluster", VERSION, standby.name, "-p", str(port + 1),
                "--", "--auth=trust",
            )  # fmt: skip
            _configure(standby.name, "127.0.0.1", "127.0.0.1/32")
            folder = f"{DATA}/{standby.name}"
            shutil.rmtree(folder)  # the standby's data are the primary's copy
            run("install", "-d", "-o", "postgres", "-g", "postgres", "-m", "700", folder)
            run(
                "runuser", "-u", "postgres", "--", "pg_basebackup", "-h", "127.0.0.1",
                "-p", str(port), "-D", folder, "-R", "-X", "stream", "-c", "fast",
            )  # fmt: skip
            standby.ctl("start")
            wait_for(
                lambda: (
                    primary.scalar(
                        "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                    )
                    == 1
                ),
                "the standby streams",
            )
            with primary.connect() as conn:
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
            wait_for(
                lambda: primary.scalar("SELECT sync_state FROM pg_stat_replication") == "sync",
                "the standby is synchronous",
            )
            yield Pair(primary, standby)
    finally:
        drop(standby.name)
