"""The README, run as a newcomer runs it: its shell blocks in order, in a fresh copy of the
repository, against a real server, each command's output compared with the `# →` line the README
shows for it.

What the comparison allows (everything else must match character for character, spacing
included): `…` stands for anything, a lease, handoff or webhook id for any id of its kind, an
instant for any instant, and a leading status (`409 {…}`) must be the one the shown error code
has. A command the README shows no answer for must print nothing. Afterwards the copy's
`git status` is clean: whatever the walk-through wrote (the database and the files titen keeps
beside it, the audit export) is ignored by git.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import TITEN, Server, eventually, free_port
from titen.api.rest.contract import CODES

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
MARK = "=====titen-readme-command====="
SHOWN = "# →"
UNKNOWN = "…"
INSTANT = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
VARYING = re.compile(rf" ?{UNKNOWN} ?|{INSTANT}|\b(?:lease|hoff|whk)_[0-9a-f]{{32}}\b")
"""What a `# →` line may show differently from a run: `…` (with the spaces around it, which
stand for a line break in `curl -i`'s headers), an instant, an id."""
NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
RELAY_LOG = re.compile(r"[\d-]+ [\d:,]+ titen\.relay .*")
"""The only lines the walk-through may write on stderr: the relay's own log (docs/cli.md)."""


def test_the_readme_starts_with_make_serve_and_make_test():
    """A newcomer's first two commands, and nothing else before them."""
    first = re.search(r"```(\w*)\n(.*?)```", README.read_text(), re.DOTALL)
    assert first and first.group(1) == "sh"
    commands = [line.split("#")[0].strip() for line in first.group(2).splitlines()]
    assert commands == ["make serve", "make test"]


def shell_blocks() -> list[str]:
    """Every ```sh block after the set-up commands (which install and serve)."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.DOTALL)
    return [b for b in blocks if "make " not in b]


def commands(block: str) -> list[tuple[str, str | None]]:
    """The block cut after each `# →` line: each piece's script and what it shows (None for
    a last piece that shows nothing)."""
    pieces, script = [], []
    for line in block.splitlines(keepends=True):
        if line.startswith(SHOWN):
            pieces.append(("".join(script), line.removeprefix(SHOWN).strip()))
            script = []
        else:
            script.append(line)
    if "".join(script).strip():
        pieces.append(("".join(script), None))
    return pieces


def pattern(shown: str) -> re.Pattern[str]:
    """What may be printed for a `# →` line (see the module's docstring)."""
    status = re.match(r"(\d{3}) (?=\{)", shown)
    if status:
        shown = shown[status.end() :]
        code = re.search(r'"code": "([A-Z_]+)"', shown)
        assert code and CODES[int(status.group(1))] == code.group(1), shown
    parts, at = [], 0
    for varying in VARYING.finditer(shown):
        parts.append(re.escape(shown[at : varying.start()]))
        text = varying.group()
        if text.strip() == UNKNOWN:
            parts.append(".*?")
        elif re.fullmatch(INSTANT, text):
            parts.append(INSTANT)
        else:
            parts.append(re.escape(text.split("_")[0]) + "_[0-9a-f]{32}")
        at = varying.end()
    parts.append(re.escape(shown[at:]))
    return re.compile("".join(parts), re.DOTALL)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A fresh copy of the repository as it stands (committed or not, what git would not
    ignore), made a git repository with everything committed; its `.venv` is this one."""
    copy = tmp_path / "titen"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is listed too
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    (copy / ".venv").symlink_to(Path(sys.executable).parents[1])
    assert (copy / ".venv" / "bin" / "titen").samefile(TITEN)
    git = ["git", "-c", "user.name=readme", "-c", "user.email=readme@titen.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=copy, check=True)
    subprocess.run([*git, "add", "-A"], cwd=copy, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], cwd=copy, check=True)
    return copy


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    """A NATS server with JetStream, of this test's own, for the relay's section."""
    if not os.path.exists(NATS_SERVER):
        if os.environ.get("TITEN_REQUIRE_NATS") == "1":
            pytest.fail("TITEN_REQUIRE_NATS=1 but there is no nats-server")
        pytest.skip("no nats-server for the README's relay section")
    port = free_port()
    store = tmp_path / "jetstream"
    process = subprocess.Popen(
        [NATS_SERVER, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        eventually(lambda: _listening(port), "nats-server listening")
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_the_walk_through_works_as_written_in_a_fresh_checkout(checkout, nats_url, tmp_path):
    # `make serve` serves ./titen.db; the webhook section asks for the server to be started
    # again with --allow-private-webhooks, so this one has it from the start.
    assert ".venv/bin/titen serve --allow-private-webhooks" in README.read_text()
    server = Server(f"sqlite:///{checkout}/titen.db", 8, "--allow-private-webhooks")
    try:
        run, status, pieces = _walk_through(checkout, server.url, nats_url, tmp_path)
    finally:
        server.stop()
    assert run.returncode == 0, run.stderr
    assert all(RELAY_LOG.fullmatch(line) for line in run.stderr.splitlines()), run.stderr
    outputs = run.stdout.split(f"{MARK}\n")
    assert outputs[-1] == "" and len(outputs) == len(pieces) + 1
    for (command, shown), output in zip(pieces, outputs, strict=False):
        if shown is None:
            assert output == "", f"{command}\nprinted, though the README shows nothing:\n{output}"
        else:
            assert pattern(shown).fullmatch(output.removesuffix("\n")), (
                f"{command}\n# → {shown}\nprinted:\n{output}"
            )
    assert status == "", f"the walk-through left files git does not ignore:\n{status}"


def _walk_through(
    checkout: Path, url: str, nats_url: str, tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], str, list[tuple[str, str | None]]]:
    """Run every piece of every block in one shell, as a reader pasting them in order would:
    what the shell printed, then what `git status` says, and the pieces as run."""
    receiver = free_port()
    ports = {
        "http://127.0.0.1:8787": url,
        "127.0.0.1:8000": f"127.0.0.1:{receiver}",
        '("127.0.0.1", 8000)': f'("127.0.0.1", {receiver})',
        "127.0.0.1:4222": nats_url,
    }
    curlrc = tmp_path / "curl"
    curlrc.mkdir()
    (curlrc / ".curlrc").write_text("silent\nshow-error\n")  # no progress meter on a pipe
    env = {k: v for k, v in os.environ.items() if not k.startswith("TITEN_")}
    env["CURL_HOME"] = str(curlrc)

    def here(text: str) -> str:
        for readme, ours in ports.items():
            text = text.replace(readme, ours)
        return text

    pieces = [
        (here(command), shown and here(shown))
        for block in shell_blocks()
        for command, shown in commands(block)
    ]
    assert len(pieces) > 20, "the README lost its walk-through"
    script = "".join(f"{command}\necho {MARK}\n" for command, _ in pieces)
    shell = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=checkout,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its background jobs (receiver, relay) in its process group
    )
    try:
        stdout, stderr = shell.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):  # a failed block left a job running
            os.killpg(shell.pid, signal.SIGTERM)
        shell.wait()
    run = subprocess.CompletedProcess(shell.args, shell.returncode, stdout, stderr)
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return run, status, pieces
