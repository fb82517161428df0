"""What the command groups share: how a command names its database or its API, and opening
the services for one command.

Heavy modules (the event store, the web framework) are imported only when a command runs, so
`titen --help` and `titen audit verify FILE` load neither.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from titen.service.database import DEFAULT_URL

if TYPE_CHECKING:
    from titen.service.bootstrap import Services

Run = Callable[[argparse.Namespace], int]
VERBOSE_HELP = (
    "say more on stderr: the database opened, every library's log lines, the traceback of an "
    "unexpected error (default: only errors, one line each)"
)


def command(group: Any, name: str, help_text: str, run: Run) -> argparse.ArgumentParser:
    """A command that runs `run`; every command takes -v/--verbose, after its name or before
    (`titen -v keys list`), which lets it say more on stderr (docs/cli.md)."""
    parser = group.add_parser(name, help=help_text, description=help_text)
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,  # so that it does not undo a -v given before the command
        help=VERBOSE_HELP,
    )
    parser.set_defaults(run=run)
    return parser


def database_command(group: Any, name: str, help_text: str, run: Run) -> argparse.ArgumentParser:
    """A command that opens the store named by --database."""
    parser = command(group, name, help_text, run)
    parser.add_argument(
        "--database",
        default=os.environ.get("TITEN_DATABASE_URL", DEFAULT_URL),
        help="sqlite:///PATH or postgresql://USER@HOST:PORT[,HOST:PORT...]/DBNAME[?PARAMS] "
        "(default: $TITEN_DATABASE_URL, else sqlite:///titen.db)",
    )
    return parser


def api_command(group: Any, name: str, help_text: str, run: Run) -> argparse.ArgumentParser:
    """A command that calls the REST API under $TITEN_API_KEY; it never opens the database."""
    parser = command(group, name, help_text, run)
    parser.add_argument(
        "--url",
        help="the REST API to call (default: $TITEN_URL, else http://127.0.0.1:8787); "
        "the key is $TITEN_API_KEY",
    )
    return parser


@contextmanager
def open_services(
    args: argparse.Namespace, pool_size: int = 2, catch_up: bool = True, announce: bool = True
) -> Iterator[Services]:
    """The services for one command, closed however it ends (`catch_up`: see `bootstrap`).

    With `announce` and -v, stderr says which database the command opened (the default one
    depends on the environment and, for a relative SQLite path, on the current folder); without
    -v a command that worked writes nothing there. `titen serve` logs it instead.
    """
    from titen.service.bootstrap import bootstrap

    opened = bootstrap(args.database, pool_size=pool_size, catch_up=catch_up)
    if announce and args.verbose:
        print(f"titen: database {opened.database.redacted()}", file=sys.stderr)
    try:
        yield opened
    finally:
        opened.close()
