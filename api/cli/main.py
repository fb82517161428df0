"""The `titen` command line: one module per command group, assembled here.

Each group imports the event store or the web framework only when one of its commands runs.
"""

from __future__ import annotations

import argparse
import logging
import sys

from titen.api.cli import agent, audit, keys, projections, serve


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from titen.service.keys import KeyRefused
    from titen.storage.database import BadDatabaseURL

    try:
        return args.run(args)
    except (BadDatabaseURL, KeyRefused) as exc:
        print(f"titen: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="titen", description="Titen: leases and handoffs for AI agents."
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    for group in (serve, agent, keys, audit, projections):
        group.add_commands(commands)
    return parser
