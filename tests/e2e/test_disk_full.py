"""A full disk under a SQLite store: 503 with Retry-After, nothing half-written, and writes
resume by themselves once there is space again. The store lives on a small tmpfs of its own
(mounting one needs root; skipped otherwise)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Http, Server, create_key

LEASE = {"purpose": "p", "ttl_seconds": 60, "resource_type": "deploy"}


@pytest.fixture
def small_disk() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder = Path(tempfile.mkdtemp(prefix="titen-full-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        folder.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


def fill(disk: Path) -> Path:
    """A file taking every free byte of `disk`."""
    filler = disk / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    return filler


def acquired(http: Http, resource: str) -> list[dict]:
    status, page = http.request("GET", "/v1/events?limit=500&types=lease.acquired")
    assert status == 200
    return [e for e in page["data"]["events"] if e["data"]["resource_id"] == resource]


def test_a_full_disk_answers_503_and_writes_resume_when_space_returns(small_disk):
    database = f"sqlite:///{small_disk / 'titen.db'}"
    key = create_key(database, "acme", "agent_alice")
    server = Server(database, 4)
    try:
        http = Http(server.url, key)
        assert http.request("POST", "/v1/leases", {**LEASE, "resource_id": "before"})[0] == 201
        filler = fill(small_disk)
        refused = []
        for n in range(20):  # until the store needs a page the disk no longer has
            status, body = http.request(
                "POST", "/v1/leases", {**LEASE, "resource_id": f"full-{n}", "purpose": "x" * 900}
            )
            assert status in (201, 503), body
            if status == 503:
                refused.append(f"full-{n}")
                assert body["error"]["code"] == "UNAVAILABLE"
                break
        assert refused, "the disk never filled"
        assert http.request("GET", "/healthz")[0] == 200
        filler.unlink()
        assert acquired(http, refused[0]) == []  # nothing half-written
        status, _ = http.request("POST", "/v1/leases", {**LEASE, "resource_id": refused[0]})
        assert status == 201
        assert len(acquired(http, refused[0])) == 1
        assert "Traceback" not in server.log_so_far()
    finally:
        server.stop()
