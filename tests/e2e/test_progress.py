"""Long commands draw progress on a terminal's stderr, and nothing in a pipe; stdout stays the
output alone. The terminal is a real pseudo-terminal, so tqdm sees what a person's shell is."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import tempfile
import termios

import pytest

from tests.support import TITEN, bearer, besides_database

LEASES = 60
EVENTS = 2 * LEASES  # a resource's first acquire records its creation too


@pytest.fixture
def recorded(services, client, key):
    alice = key("acme", "agent_alice")
    for n in range(LEASES):
        lease = {
            "resource_type": "deploy",
            "resource_id": f"r{n}",
            "purpose": "p",
            "ttl_seconds": 60,
        }
        assert (
            client.simulate_post("/v1/leases", json=lease, headers=bearer(alice)).status
            == "201 Created"
        )


def run(*args: str, terminal: bool) -> tuple[int, str, str]:
    """Run `titen`; stderr on a pseudo-terminal or a pipe. Its exit status, stdout, stderr."""
    with tempfile.TemporaryFile() as stdout:
        if not terminal:
            done = subprocess.run([TITEN, *args], stdout=stdout, stderr=subprocess.PIPE, timeout=60)
            stdout.seek(0)
            return done.returncode, stdout.read().decode(), besides_database(done.stderr.decode())
        controller, tty = pty.openpty()
        fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
        process = subprocess.Popen(
            [TITEN, *args], stdout=stdout, stderr=tty, stdin=subprocess.DEVNULL
        )
        os.close(tty)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed: the process is done with it
                break
            if not chunk:
                break
            shown += chunk
        os.close(controller)
        returncode = process.wait(timeout=60)
        stdout.seek(0)
        return returncode, stdout.read().decode(), shown.decode(errors="replace")


def test_an_export_shows_progress_on_a_terminal_and_stdout_is_the_export(
    database, recorded, tmp_path
):
    status, export, shown = run(
        "audit", "export", "--org", "acme", "--database", database, terminal=True
    )
    assert status == 0
    assert "export acme" in shown and "events/s" in shown and "100%" in shown
    assert export.startswith('{"') and "events/s" not in export
    path = tmp_path / "export.jsonl"
    path.write_text(export)
    status, verified, shown = run("audit", "verify", str(path), terminal=True)
    assert status == 0 and verified.startswith(f"ok: {EVENTS} events")
    assert "verify" in shown and "lines/s" in shown


def test_nothing_is_drawn_in_a_pipe(database, recorded, tmp_path):
    status, export, said = run(
        "audit", "export", "--org", "acme", "--database", database, terminal=False
    )
    assert (status, said) == (0, "")  # the summary is for -v, or with --output on stdout
    path = tmp_path / "export.jsonl"
    path.write_text(export)
    status, verified, said = run("audit", "verify", str(path), terminal=False)
    assert status == 0 and verified.startswith(f"ok: {EVENTS} events") and said == ""


def test_projections_rebuild_and_verify_show_progress_on_a_terminal_only(database, recorded):
    for action in ("rebuild", "verify"):
        args = ("projections", action, "lease_index", "--database", database)
        status, said, shown = run(*args, terminal=True)
        assert status == 0 and "lease_index" in said
        assert f"{action} lease_index" in shown and "events/s" in shown and "100%" in shown
        status, said, quiet = run(*args, terminal=False)
        assert status == 0 and "lease_index" in said and quiet == ""
