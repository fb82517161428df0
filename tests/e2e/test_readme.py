"""The README's walk-through works as written, against a real server."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support import TITEN, Server

README = Path(__file__).parents[2] / "README.md"
MARK = "=====titen-readme-block====="


def shell_blocks() -> list[str]:
    """Every ```sh block after the set-up commands (which install and serve)."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.DOTALL)
    return [b for b in blocks if "make " not in b]


def expected_codes(block: str) -> list[str]:
    """Error codes the block's `# →` comments promise, and "data" for successes."""
    promised = []
    for line in block.splitlines():
        if line.startswith("# →"):
            match = re.search(r'"code": "([A-Z_]+)"', line)
            promised.append(match.group(1) if match else '"data"')
    return promised


def json_objects(text: str) -> list[dict]:
    """The JSON objects in curl's output, which ends without a newline and so runs them together."""
    decoder, found, at = json.JSONDecoder(), [], text.find("{")
    while at != -1:
        obj, end = decoder.raw_decode(text, at)
        found.append(obj)
        at = text.find("{", end)
    return found


@pytest.fixture
def readme_env(tmp_path: Path):
    database = f"sqlite:///{tmp_path}/titen.db"
    server = Server(database)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "titen").symlink_to(TITEN)
    env = {**os.environ, "TITEN_DATABASE_URL": database}
    yield tmp_path, server, env
    server.stop()


def test_the_walk_through_works_as_written(readme_env):
    cwd, server, env = readme_env
    blocks = shell_blocks()
    assert blocks, "the README lost its walk-through"
    script = f"\necho {MARK}\n".join(b.replace("http://127.0.0.1:8787", server.url) for b in blocks)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    outputs = result.stdout.split(MARK)
    assert len(outputs) == len(blocks)
    for block, output in zip(blocks, outputs, strict=True):
        answers = json_objects(output)
        got = [a["error"]["code"] if "error" in a else '"data"' for a in answers]
        assert got == expected_codes(block), f"block:\n{block}\noutput:\n{output}"
