"""Cluster tests build real PostgreSQL clusters (a primary and its synchronous standby) and
network namespaces: root and Debian's PostgreSQL tools are needed, else they skip saying why
(CI, which runs .ci/run as root, fails instead)."""

from __future__ import annotations

import os

import pytest

from tests.cluster.replication import why_not


@pytest.fixture(autouse=True)
def cluster_tools() -> None:
    reason = why_not()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"cluster tests cannot run: {reason} (.ci/run runs them as root)")
    pytest.skip(reason)
