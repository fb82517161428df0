"""`titen projections rebuild|verify`: the read models against the log, for someone with
database access.

projections rebuild [NAME]     rebuild from the log beside the live tables, then swap in
projections verify [NAME]      rebuild into scratch tables and compare; non-zero at a difference

Exit status: 0 done, 1 a difference found, 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from titen.api.cli.options import database_command, open_services
from titen.api.cli.progress import progress

if TYPE_CHECKING:
    from titen.service.bootstrap import Services


def add_commands(commands: Any) -> None:
    projections = commands.add_parser("projections", help="rebuild or check the read models")
    actions = projections.add_subparsers(required=True, metavar="ACTION")
    rebuild = database_command(
        actions, "rebuild", "rebuild from the log, safe while serving", _rebuild
    )
    check_ = database_command(
        actions, "verify", "compare with a fresh rebuild", _verify_projections
    )
    for parser in (rebuild, check_):
        parser.add_argument("name", nargs="?", help="one projection (default: all of them)")


def _rebuild(args: argparse.Namespace) -> int:
    with open_services(args, catch_up=False) as services:
        names = _names(services, args.name)
        for name in names:
            log_end = services.app.recorder.max_notification_id() or 0
            with progress(f"rebuild {name}", log_end, "events") as report:
                position = services.projector.rebuild(name, report)
            print(f"rebuilt {name} up to log position {position}")
    return 0 if names else 2


def _verify_projections(args: argparse.Namespace) -> int:
    with open_services(args, catch_up=False) as services:
        names = _names(services, args.name)
        for name in names:
            live = services.store.max_tracking_id(name) or 0
            with progress(f"verify {name}", live, "events") as report:
                difference = services.projector.verify(name, report)
            if difference is not None:
                print(f"titen: {difference}", file=sys.stderr)
                return 1
            print(f"ok: {name} equals a rebuild from the log")
    return 0 if names else 2


def _names(services: Services, name: str | None) -> list[str]:
    """The projections to act on: all, or the one named (none, and a message, if unknown)."""
    known = list(services.projector.projections)
    if name is None:
        return known
    if name not in known:
        print(f"titen: no projection {name!r}; known: {', '.join(known)}", file=sys.stderr)
        return []
    return [name]
