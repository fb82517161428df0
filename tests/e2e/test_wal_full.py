"""PostgreSQL's WAL on a full disk, under a real server: 503 and never 500 while PostgreSQL is
down, every answer true of the log, and writes resume by themselves once it is back.

A full WAL disk is not an error PostgreSQL rolls back: the backend that cannot create a WAL
segment PANICs, the postmaster ends every session and runs crash recovery, which must write WAL
as well, fails the same way, and shuts PostgreSQL down until an operator frees space and starts
it. The test makes a throwaway cluster of its own whose `pg_wal` is a small tmpfs (root, and
PostgreSQL's Debian cluster tools, are needed: skipped otherwise), fills that tmpfs, and
switches to a new WAL segment so the next write needs one.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e.test_disk_full import fill
from tests.e2e.test_postgres_disk_full import acquired, call
from tests.support import Server, create_key, eventually, free_port

LEASE = {"purpose": "p", "ttl_seconds": 600, "resource_type": "deploy"}
UNKNOWN = "OUTCOME_UNKNOWN"
"""The code of a 503 whose write may have been saved (retry with the key to learn)."""
ATTEMPTS = 200
"""Acquires tried after the WAL switch before giving up on seeing PostgreSQL go down."""


@pytest.fixture
def wal_on_small_disk() -> Iterator[tuple[str, Path, list[str]]]:
    """A fresh cluster's database URL, the tmpfs its WAL is on, and the command that starts it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs and making a cluster need root")
    if shutil.which("pg_createcluster") is None or not Path("/usr/lib/postgresql").is_dir():
        pytest.skip("PostgreSQL's cluster tools (postgresql-common) are not installed")
    version = sorted(os.listdir("/usr/lib/postgresql"))[-1]
    owner = pwd.getpwnam("postgres")
    folder = Path(tempfile.mkdtemp(prefix="titen-wal-full-"))
    options = f"size=64m,uid={owner.pw_uid},gid={owner.pw_gid},mode=0700"
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        folder.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    name, port = f"titen_wal_{uuid.uuid4().hex[:8]}", free_port()
    start = ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, "start"]
    try:
        subprocess.run(
            ["pg_createcluster", version, name, "-p", str(port), "--",
             "--auth=trust", f"--waldir={folder}/wal"],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(start, check=True, capture_output=True)
        with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres") as conn:
            conn.autocommit = True
            conn.execute("CREATE DATABASE titen")
        yield f"postgresql://postgres@127.0.0.1:{port}/titen", folder, start
    finally:
        subprocess.run(["pg_dropcluster", "--stop", version, name], capture_output=True)
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


def test_a_full_wal_disk_answers_503_and_writes_resume_when_postgresql_is_back(
    wal_on_small_disk,
):
    database, disk, start = wal_on_small_disk
    key = create_key(database, "acme", "agent_alice")
    server = Server(database, 4)

    def acquire(resource: str) -> tuple[int, dict, dict]:
        lease = {**LEASE, "resource_id": resource}
        return call(server.port, key, "POST", "/v1/leases", lease, {"Idempotency-Key": resource})

    try:
        assert acquire("before")[0] == 201
        ballast = fill(disk)
        with psycopg.connect(database) as conn:
            conn.execute("SELECT pg_switch_wal()")  # the next write needs a new segment
        answers: dict[str, tuple[int, dict]] = {}
        for n in range(ATTEMPTS):
            status, headers, body = acquire(f"r{n}")
            answers[f"r{n}"] = status, body
            assert status in (201, 503), body
            if status == 503:
                code = body["error"]["code"]
                assert code in ("UNAVAILABLE", UNKNOWN) and int(headers["Retry-After"]) > 0
            if [s for s, _ in answers.values()].count(503) == 3:
                break
        assert [s for s, _ in answers.values()].count(503) == 3, answers
        assert call(server.port, key, "GET", "/healthz")[0] == 200
        eventually(
            lambda: call(server.port, key, "GET", "/readyz")[0] == 503, "unready: it is down"
        )
        assert subprocess.run(["pg_isready", "-q", "-d", database]).returncode != 0
        ballast.unlink()
        subprocess.run(start, check=True, capture_output=True)  # the operator's part
        eventually(lambda: acquire("after")[0] == 201, "writes resume", timeout=30)
        counts = acquired(database)
        for resource, (status, body) in answers.items():
            found = counts.get(resource, 0)
            if status == 201:
                assert found == 1, (resource, body)
            else:
                assert found == 0 or (body["error"]["code"] == UNKNOWN and found == 1), (
                    resource,
                    body,
                )
                assert acquire(resource)[0] == 201  # retried with its key: once
        counts = acquired(database)
        assert set(counts.values()) == {1}
        assert "Traceback" not in server.log_so_far()
    finally:
        server.stop()
