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

from titen.storage.database import DEFAULT_URL

if TYPE_CHECKING:
    from titen.service.bootstrap import Services

Run = Callable[[argparse.Namespace], int]


def database_command(group: Any, name: str, help_text: str, run: Run) -> argparse.ArgumentParser:
    """A command that opens the store named by --database."""
    command = group.add_parser(name, help=help_text)
    command.add_argument(
        "--database",
        default=os.environ.get("TITEN_DATABASE_URL", DEFAULT_URL),
        help="sqlite:///PATH or postgresql://USER@HOST:PORT/DBNAME "
        "(default: $TITEN_DATABASE_URL, else sqlite:///titen.db)",
    )
    command.set_defaults(run=run)
    return command


def api_command(group: Any, name: str, help_text: str, run: Run) -> argparse.ArgumentParser:
    """A command that calls the REST API under $TITEN_API_KEY; it never opens the database."""
    command = group.add_parser(name, help=help_text)
    command.add_argument(
        "--url",
        help="the REST API to call (default: $TITEN_URL, else http://127.0.0.1:8787); "
        "the key is $TITEN_API_KEY",
    )
    command.set_defaults(run=run)
    return command


@contextmanager
def open_services(
    args: argparse.Namespace, pool_size: int = 2, catch_up: bool = True, announce: bool = True
) -> Iterator[Services]:
    """The services for one command, closed however it ends (`catch_up`: see `bootstrap`).

    With `announce`, stderr says which database the command opened (the default one depends on
    the environment and, for a relative SQLite path, on the current folder); `titen serve`
    logs it instead.
    """
    from titen.service.bootstrap import bootstrap

    opened = bootstrap(args.database, pool_size=pool_size, catch_up=catch_up)
    if announce:
        print(f"titen: database {opened.database.redacted()}", file=sys.stderr)
    try:
        yield opened
    finally:
        opened.close()
