"""Every command that opens a store answers a malformed or unreachable `--database` with one line
on stderr and exit status 2, before doing anything else.

The commands are found by walking the real parser, so a command added later with `--database`
fails here until it is listed with the arguments it needs.
"""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator

import pytest

from tests.support import TITEN
from titen.api.cli.main import _parser

# Each command that takes --database, with what else it needs to get as far as opening it.
COMMANDS = {
    "serve": ["--port", "0"],
    "keys create": ["--org", "acme"],
    "keys list": ["--org", "acme"],
    "keys revoke": ["--org", "acme", "--principal", "agent_a"],
    "audit lease": ["lease_0123456789abcdef0123456789abcdef", "--org", "acme"],
    "audit resource": ["deploy", "checkout", "--org", "acme"],
    "audit handoff": ["hoff_0123456789abcdef0123456789abcdef", "--org", "acme"],
    "audit export": ["--org", "acme"],
    "projections rebuild": [],
    "projections verify": [],
    "relay nats": ["--url", "nats://127.0.0.1:1"],
}
MALFORMED = {
    "a port that is not a number": "postgresql://titen@127.0.0.1:notaport/titen",
    "a port out of range": "postgresql://titen@127.0.0.1:99999/titen",
    "an unclosed IPv6 host": "postgresql://titen@[::1/titen",
    "a second host's port that is not a number": "postgresql://titen@127.0.0.1:1,h:x/titen",
    "a parameter libpq does not know": "postgresql://titen@127.0.0.1:1/titen?no_such=1",
}
UNREACHABLE = {
    "nothing listening": "postgresql://titen@127.0.0.1:1/titen",
    "nothing listening on any host": (
        "postgresql://titen@127.0.0.1:1,127.0.0.1:2/titen?target_session_attrs=read-write"
    ),
    "no such folder": "sqlite:////nonexistent-folder/titen.db",
}


def database_commands(parser: argparse.ArgumentParser, name: str = "") -> Iterator[str]:
    """The commands (as typed: `keys create`) that take --database."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from database_commands(sub, f"{name} {sub_name}".strip())
        elif "--database" in action.option_strings:
            yield name


def test_every_command_with_a_database_is_checked_here():
    assert sorted(database_commands(_parser())) == sorted(COMMANDS)


@pytest.mark.parametrize(
    "url", [*MALFORMED.values(), *UNREACHABLE.values()], ids=[*MALFORMED, *UNREACHABLE]
)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_database_is_one_line_and_exit_2(command, url, tmp_path):
    result = subprocess.run(
        [TITEN, *command.split(), *COMMANDS[command], "--database", url],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    lines = result.stderr.splitlines()
    assert (result.returncode, len(lines)) == (2, 1), result.stderr
    assert lines[0].startswith("titen: "), result.stderr
    assert result.stdout == ""
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing made, not even a default store
