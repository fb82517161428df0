"""Cluster tests build real PostgreSQL clusters (a primary and its synchronous standby) and
network namespaces: root and Debian's PostgreSQL tools are needed, else they skip saying why
(CI, which runs .ci/run as root, fails instead)."""

from __future__ import annotations

import os

import pytest

from tests.cluster.replication import why_not


def cannot_run(reason: str | None) -> None:
    """Skip, saying why, when `reason` is not None; in CI, fail instead."""
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"cluster tests cannot run: {reason} (.ci/run runs them as root)")
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def cluster_tools() -> None:
    cannot_run(why_not())
