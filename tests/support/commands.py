"""The real `titen` command line, and keys and commits made in the test's own process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TITEN = str(Path(sys.executable).with_name("titen"))


def besides_database(stderr: str) -> str:
    """What a command wrote to stderr besides the line naming the database it opened."""
    lines = stderr.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("titen: database "))


def titen(
    *args: str, database: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real `titen` command line (`env` added to its environment); a failure checked
    for shows what the command said."""
    run = subprocess.run(
        [TITEN, *args, "--database", database],
        capture_output=True,
        text=True,
        timeout=60,
        env=None if env is None else {**os.environ, **env},
    )
    if check and run.returncode:
        raise AssertionError(f"titen {' '.join(args)} exited {run.returncode}:\n{run.stderr}")
    return run


def create_key(database: str, org: str, principal: str, role: str = "agent") -> str:
    """A key made as `titen keys create` makes it (its services, opened and closed again), in
    this process: the command's own start was a third of a second of CPU, paid by hundreds of
    tests whose point is not the command (tests/e2e/test_cli.py runs it)."""
    from titen.service.bootstrap import bootstrap  # the client's tests load no server code

    services = bootstrap(database, pool_size=2)
    try:
        return services.keys.create(org, principal, role)
    finally:
        services.close()


def acquire(services: Any, n: int, organization: str = "acme") -> None:
    """An in-process acquire of resource `r{n}` by agent_a of `organization`, for tests whose
    point is the commit it makes, not the lease (`services`: titen.service.bootstrap's)."""
    services.app.acquire_lease(
        organization=organization,
        holder="agent_a",
        resource_type="deploy",
        resource_id=f"r{n}",
        purpose="p",
        ttl_seconds=60,
    )
