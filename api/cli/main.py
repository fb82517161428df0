"""The `titen` command line: one module per command group, assembled here.

Each group imports the event store or the web framework only when one of its commands runs.
"""

from __future__ import annotations

import argparse
import logging
import sys

from titen.api.cli import agent, audit, keys, openapi, projections, relay, serve
from titen.storage.database import BadDatabaseURL, CannotOpen


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        return args.run(args)
    except Exception as exc:
        if not _refusal(exc):
            raise
        print(f"titen: {exc}", file=sys.stderr)
        return 2


def _refusal(exc: Exception) -> bool:
    """Whether a command was refused for a reason its message states (exit 2, no traceback).

    A read model that fails on an event while the store is opened is such a refusal too: the
    failure was logged with its traceback, and the message says how to repair it.
    The key store and the projections are imported only here, once something failed, so that
    commands which never open a store load no database driver.
    """
    from titen.api.rest.settings import BadSettings
    from titen.projections.failures import ProjectionFailed
    from titen.service.keys import KeyRefused

    refusals = (BadDatabaseURL, CannotOpen, KeyRefused, ProjectionFailed, BadSettings)
    if isinstance(exc, refusals):
        return True
    if "titen.api.rest.connections" in sys.modules:  # loaded only by `serve`
        from titen.api.rest.connections import CannotListen

        return isinstance(exc, CannotListen)
    return False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="titen", description="Titen: leases and handoffs for AI agents."
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    for group in (serve, agent, keys, audit, projections, openapi, relay):
        group.add_commands(commands)
    return parser
