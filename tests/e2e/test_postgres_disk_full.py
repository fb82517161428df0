"""A full disk under PostgreSQL: 503 with Retry-After, never 500, nothing half-written, and writes
resume by themselves once there is space again.

The store is a database of its own whose tablespace is a small tmpfs (mounting one needs root,
and the PostgreSQL server must run on this machine: skipped otherwise). Filled up, PostgreSQL
refuses to extend a table (`could not extend file ...: No space left on device`, SQLSTATE 53100)
and rolls the transaction back; the server itself keeps running. (WAL on a full disk is another
matter: PostgreSQL PANICs and stays down, docs/operations.md.)
"""

from __future__ import annotations

import http.client
import json
import os
import pwd
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e.test_disk_full import fill
from tests.support import Server, create_key, titen

LEASE = {"purpose": "p", "ttl_seconds": 600, "resource_type": "deploy"}
ATTEMPTS = 2000
"""Acquires tried on the full disk before giving up on seeing it refuse one (each one needs a
few hundred bytes, and the tables' last pages had some free room when it filled)."""


@pytest.fixture
def full_database(postgres_database: str) -> Iterator[tuple[str, Path]]:
    """The URL of a fresh database whose tablespace is a 16 MB tmpfs, and that tmpfs."""
    conninfo = postgres_database.split("?", 1)[0]
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    host = conninfo.split("@", 1)[1].split(":", 1)[0].split("/", 1)[0]
    if host not in ("127.0.0.1", "localhost"):
        pytest.skip("the PostgreSQL server must run on this machine to use a tmpfs here")
    owner = pwd.getpwnam("postgres")
    folder = Path(tempfile.mkdtemp(prefix="titen-pg-full-"))
    options = f"size=16m,uid={owner.pw_uid},gid={owner.pw_gid},mode=0700"
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        folder.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    name = f"titen_full_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"CREATE TABLESPACE {name} LOCATION '{folder}'")
            conn.execute(f"CREATE DATABASE {name} TABLESPACE {name}")
        yield conninfo.rsplit("/", 1)[0] + f"/{name}", folder
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"DROP TABLESPACE IF EXISTS {name}")
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


def call(port: int, key: str, method: str, path: str, body: object = None, headers=None):
    """Status, headers and JSON body of one request over a real connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        sent = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        conn.request(method, path, json.dumps(body), {**sent, **(headers or {})})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        conn.close()


def acquired(database: str) -> dict[str, int]:
    """How many times the log shows each resource acquired, read by an operator."""
    lines = titen("audit", "export", "--org", "acme", database=database).stdout.splitlines()
    counts: dict[str, int] = {}
    for record in map(json.loads, lines):
        if record.get("type") == "lease.acquired":
            resource = record["payload"]["resource_id"]
            counts[resource] = counts.get(resource, 0) + 1
    return counts


def test_a_full_postgresql_disk_answers_503_and_writes_resume_when_space_returns(full_database):
    database, disk = full_database
    key = create_key(database, "acme", "agent_alice")
    server = Server(database, 4)

    def acquire(resource: str) -> tuple[int, dict, dict]:
        lease = {**LEASE, "resource_id": resource}
        return call(server.port, key, "POST", "/v1/leases", lease, {"Idempotency-Key": resource})

    try:
        assert acquire("before")[0] == 201
        ballast = fill(disk)
        answers = {}
        for n in range(ATTEMPTS):
            resource = f"r{n}"
            status, headers, body = acquire(resource)
            answers[resource] = status
            if status != 201:
                break
        assert status == 503 and body["error"]["code"] == "UNAVAILABLE", body
        assert int(headers["Retry-After"]) > 0
        assert call(server.port, key, "GET", "/healthz")[0] == 200
        ballast.unlink()
        status, _, body = acquire(resource)  # the refused one, retried with its key
        assert status == 201, body
        assert call(server.port, key, "GET", "/readyz")[0] == 200
        counts = acquired(database)
        assert counts.pop("before") == 1 and counts.pop(resource) == 1
        assert counts == {r: 1 for r, s in answers.items() if s == 201}
        assert "Traceback" not in server.log_so_far()
    finally:
        server.stop()
