"""The `titen` command line: one module per command group, assembled here.

Each group imports the event store or the web framework only when one of its commands runs.

What a command writes where (docs/cli.md): its data on stdout; on stderr nothing when it worked
(a long-running command's log excepted), and one line starting `titen: ` for whatever went wrong,
in this project's words. `-v` says more: the database opened, every library's log lines and the
traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import NoReturn

from titen.api.cli import agent, audit, keys, listings, openapi, projections, relay, serve
from titen.api.cli.options import VERBOSE_HELP

PIPE_CLOSED = 141
"""The exit status of a command whose reader went away: 128 + SIGPIPE, as a shell reports a
Unix tool that the signal ended (`yes | head -1`)."""
INTERRUPTED = 130
"""128 + SIGINT: stopped with Ctrl-C."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that says where the usage is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"titen: {message} (see `{self.prog} --help`)\n")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _configure_logging(args)
    try:
        return args.run(args)
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt:
        return INTERRUPTED
    except Exception as exc:
        if _refusal(exc):
            return _say(str(exc), 2)
        unavailable = _unavailable(args, exc)
        if unavailable is not None:
            return _say(unavailable, EX_TEMPFAIL)
        if isinstance(exc, OSError) and exc.filename is not None:
            return _say(file_error(exc), 2)
        if args.verbose:
            raise
        return _say(f"unexpected {type(exc).__name__}: {exc} (-v shows where)", 1)


def _say(message: str, status: int) -> int:
    """Write `message` as the one line of a failed command (a database's reason may span
    several) and return the exit status."""
    print(f"titen: {' '.join(message.split())}", file=sys.stderr)
    return status


def file_error(exc: OSError) -> str:
    """A failed file operation as `PATH: reason`, the way Unix tools word it."""
    return f"{exc.filename}: {exc.strerror or exc}"


def _reader_gone() -> int:
    """The reader of stdout closed it (`titen openapi | head -1`): stop without a word.

    Later writes, including the interpreter's final flush, go to /dev/null, so no second
    BrokenPipeError is reported while exiting.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return PIPE_CLOSED


def _configure_logging(args: argparse.Namespace) -> None:
    """Who may write log lines to stderr.

    With -v, everyone from INFO up. Otherwise a command that runs until stopped (`serve`,
    `relay`, `mcp`: `until_stopped`) logs titen's own lines from INFO up, such as the relay's
    progress, and other libraries' only from WARNING up; a command that answers and exits logs
    nothing: whatever went wrong is the one line `main` writes. `titen serve` then sets its own
    request log up (docs/operations.md).
    """
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    elif getattr(args, "until_stopped", False):
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("titen").setLevel(logging.INFO)
    else:
        logging.basicConfig(handlers=[logging.NullHandler()])


EX_TEMPFAIL = 75
"""The exit status of a command the database failed (sysexits.h: a temporary failure, retry)."""


def _unavailable(args: argparse.Namespace, exc: Exception) -> str | None:
    """Why the database failed the command, in one line, if that is what happened: a full
    PostgreSQL, one that went away or does not answer, or a SQLite file locked or full."""
    if "eventsourcing" not in sys.modules or not hasattr(args, "database"):
        return None  # no store was opened: this was no outage
    from titen.service.database import parse
    from titen.service.outages import is_outage

    if not is_outage(exc):
        return None
    return parse(args.database).why_unavailable(exc)


def _refusal(exc: Exception) -> bool:
    """Whether a command was refused for a reason its message states (exit 2, no traceback).

    A read model that fails on an event while the store is opened is such a refusal too: the
    message says how to repair it (and -v shows the failure's traceback in the log).
    The key store and the projections are imported only here, once something failed, so that
    commands which never open a store load no database driver.
    """
    from titen.api.rest.settings import BadSettings
    from titen.service.database import BadDatabaseURL, CannotOpen
    from titen.service.keys import KeyRefused
    from titen.service.read_models import ProjectionFailed

    refusals = (BadDatabaseURL, CannotOpen, KeyRefused, ProjectionFailed, BadSettings)
    if isinstance(exc, refusals):
        return True
    if "titen.api.rest.connections" in sys.modules:  # loaded only by `serve`
        from titen.api.rest.connections import CannotListen

        return isinstance(exc, CannotListen)
    return False


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="titen", description="Titen: leases and handoffs for AI agents.")
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    for group in (serve, agent, listings, keys, audit, projections, openapi, relay):
        group.add_commands(commands)
    return parser
