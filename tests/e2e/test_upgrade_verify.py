"""`titen projections verify`, the first command run on a store an earlier release wrote, on each
backend: every read model equals a rebuild from the log, the event log as it was published
included (tests/integration/test_previous_release.py checks the same in-process, and that a
rebuild rewrites nothing)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.support import TITEN
from titen.service.bootstrap import bootstrap


def read_models(tmp_path: Path) -> set[str]:
    """The names of today's read models, from an empty store."""
    services = bootstrap(f"sqlite:///{tmp_path}/empty.db")
    try:
        return set(services.projector.projections)
    finally:
        services.close()


def test_verify_passes_on_a_store_an_earlier_release_wrote(
    earlier_release: tuple[str, str, dict[str, Any]], tmp_path: Path
):
    _, url, _ = earlier_release
    result = subprocess.run(
        [TITEN, "projections", "verify", "--database", url],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    verified = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("ok: ")}
    assert verified == read_models(tmp_path), result.stdout
