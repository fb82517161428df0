"""What `titen` writes where (docs/cli.md): data on stdout, nothing on stderr when a command
worked, one line in titen's words when it did not, and a quiet end when the reader of stdout goes
away. Real processes, as a shell runs them."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import TITEN, Http, Server, create_key, titen
from titen.api.cli.main import PIPE_CLOSED, _parser

ACQUIRE = {"resource_type": "deploy", "resource_id": "checkout", "purpose": "p", "ttl_seconds": 60}


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        [TITEN, *args], capture_output=True, text=True, timeout=60, env=env, cwd=cwd
    )


def test_commands_that_work_write_nothing_on_stderr(database, tmp_path):
    key = create_key(database, "acme", "agent_a")
    export = tmp_path / "acme.audit.jsonl"
    commands = [
        ("keys", "create", "--org", "acme", "--principal", "agent_b"),
        ("keys", "list", "--org", "acme"),
        ("keys", "revoke", "--org", "acme", "--principal", "agent_b"),
        ("audit", "resource", "deploy", "checkout", "--org", "acme"),
        ("audit", "export", "--org", "acme"),
        ("audit", "export", "--org", "acme", "--output", str(export)),
        ("projections", "verify"),
        ("projections", "rebuild", "lease_index"),
    ]
    server = Server(database)
    try:
        assert Http(server.url, key).request("POST", "/v1/leases", ACQUIRE)[0] == 201
        for command in commands:
            done = titen(*command, database=database)
            assert (done.stderr, done.stdout != "") == ("", True), command
    finally:
        server.stop()
    summary = titen("audit", "export", "--org", "acme", "--output", str(export), database=database)
    assert summary.stdout.startswith("exported 2 events of acme; chain head ")
    verified = run("audit", "verify", str(export))
    assert (verified.returncode, verified.stderr) == (0, "")
    assert verified.stdout.startswith("ok: 2 events; chain head ")
    assert (run("openapi").stderr, run("--help").stderr) == ("", "")


def test_verbose_names_the_database_before_or_after_the_command(tmp_path):
    database = f"sqlite:///{tmp_path}/named.db"
    for args in (["-v", "keys", "list"], ["keys", "list", "-v"], ["keys", "list", "--verbose"]):
        listing = run(*args, "--org", "acme", "--database", database)
        assert listing.returncode == 0 and listing.stdout == ""
        assert listing.stderr == f"titen: database {database}\n"
    quiet = run("keys", "list", "--org", "acme", "--database", database)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")


def test_verbose_shows_the_export_summary_when_stdout_is_the_export(tmp_path):
    database = f"sqlite:///{tmp_path}/titen.db"
    create_key(database, "acme", "agent_a")
    exported = run("-v", "audit", "export", "--org", "acme", "--database", database)
    assert json.loads(exported.stdout.splitlines()[0])["record"] == "header"
    assert exported.stderr.splitlines()[-1].startswith("titen: exported 0 events of acme; ")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["audit", "verify", "/nonexistent/acme.jsonl"],
            "titen: /nonexistent/acme.jsonl: No such file or directory",
        ),
        (
            ["audit", "export", "--org", "acme", "--output", "/nonexistent/acme.jsonl"],
            "titen: /nonexistent/acme.jsonl: No such file or directory",
        ),
        (["audit", "verify", "."], "titen: .: Is a directory"),
        (
            ["keys", "list", "--org", "acme", "--bogus"],
            "titen: unrecognized arguments: --bogus (see `titen --help`)",
        ),
        (
            ["serve", "--port", "eighty"],
            "titen: argument --port: invalid int value: 'eighty' (see `titen serve --help`)",
        ),
        (
            ["keys", "revoke", "--org", "acme", "--principal", "agent_nobody"],
            "titen: acme has no unrevoked key of principal agent_nobody",
        ),
    ],
)
def test_an_error_is_one_line_in_titens_words(tmp_path, args, line):
    env = {**os.environ, "TITEN_DATABASE_URL": f"sqlite:///{tmp_path}/titen.db"}
    failed = run(*args, env=env, cwd=tmp_path)
    assert failed.returncode in (1, 2)
    assert (failed.stdout, failed.stderr) == ("", line + "\n")


def test_events_tail_says_why_in_one_line_without_the_http_clients_log(tmp_path):
    server = Server(f"sqlite:///{tmp_path}/titen.db")
    try:
        env = {**os.environ, "TITEN_URL": server.url, "TITEN_API_KEY": "titen_" + "0" * 48}
        refused = run("events", "tail", env=env)
    finally:
        server.stop()
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("titen: A valid API key is required")
    assert refused.stderr.count("\n") == 1


def test_a_closed_stdout_ends_the_command_quietly():
    """The reader is gone before the first write, so the write fails every time."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [TITEN, "openapi"], stdout=write, stderr=subprocess.PIPE, text=True, timeout=60
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (PIPE_CLOSED, "")


def test_titen_openapi_piped_into_head_prints_its_first_line_and_nothing_else():
    shell = subprocess.run(
        ["bash", "-c", f"{TITEN} openapi | head -1"], capture_output=True, text=True, timeout=60
    )
    assert (shell.returncode, shell.stdout, shell.stderr) == (0, "{\n", "")


def _options(parser: argparse.ArgumentParser, name: str):
    """Every option of every command under `parser` that may be left out, with the command's
    name (not one of a group of which one must be given, like `keys revoke --principal`)."""
    chosen = {a for g in parser._mutually_exclusive_groups if g.required for a in g._group_actions}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _options(sub, f"{name} {sub_name}")
        elif not (action.required or action in chosen or isinstance(action, argparse._HelpAction)):
            yield name, action


def test_help_shows_every_default():
    """An option that may be left out says, in --help, what leaving it out means."""
    found = 0
    for command, action in _options(_parser(), "titen"):
        found += 1
        assert action.help and "default" in action.help, (command, action.option_strings)
    assert found > 40
    shown = run("serve", "--help").stdout
    for default in ("127.0.0.1", "8787", "16", "10.0", "10000", "15.0"):
        assert f"(default: {default})" in " ".join(shown.split()), default
