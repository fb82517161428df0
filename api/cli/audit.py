"""`titen audit …` and `titen projections …`: the record, for someone with database access.

audit lease|resource|handoff   one history, as the audit routes answer it (JSON on stdout)
audit export                   every event of an organization as hash-chained JSON Lines
audit verify FILE              recompute an export's chain; non-zero at the first bad line
projections rebuild [NAME]     rebuild from the log beside the live tables, then swap in
projections verify [NAME]      rebuild into scratch tables and compare; non-zero at a difference

Exit status: 0 done, 1 not found or not as recorded, 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any, TextIO

from titen.api.cli.audit_chain import check, seal
from titen.domain.clock import iso, parse_iso
from titen.domain.errors import NotFound
from titen.service.auditor import Auditor
from titen.service.bootstrap import Services, bootstrap

Command = Callable[..., argparse.ArgumentParser]


def add_commands(commands: Any, command: Command) -> None:
    """Add both groups to the `titen` parser; `command` adds one that opens the database."""
    audit = commands.add_parser("audit", help="histories and exports from the event log")
    actions = audit.add_subparsers(required=True, metavar="ACTION")
    lease = command(actions, "lease", "one lease's term and events", _lease)
    lease.add_argument("lease_id")
    resource = command(actions, "resource", "every term on a resource", _resource)
    resource.add_argument("resource_type")
    resource.add_argument("resource_id")
    handoff = command(actions, "handoff", "one handoff's state and events", _handoff)
    handoff.add_argument("handoff_id")
    for parser in (lease, resource, handoff):
        parser.add_argument("--org", required=True)
        parser.add_argument("--as-of", type=_instant, help="answer as of this instant")
    export = command(actions, "export", "an organization's events as chained JSON Lines", _export)
    export.add_argument("--org", required=True)
    export.add_argument("--since", type=_instant, help="only events recorded from this instant")
    export.add_argument("--output", help="a file to write (default: stdout)")
    verify = actions.add_parser("verify", help="check an export's hash chain")
    verify.add_argument("file")
    verify.add_argument("--head", help="the chain head recorded at export, to compare with")
    verify.set_defaults(run=_verify)

    projections = commands.add_parser("projections", help="rebuild or check the read models")
    actions = projections.add_subparsers(required=True, metavar="ACTION")
    rebuild = command(actions, "rebuild", "rebuild from the log, safe while serving", _rebuild)
    check_ = command(actions, "verify", "compare with a fresh rebuild", _verify_projections)
    for parser in (rebuild, check_):
        parser.add_argument("name", nargs="?", help="one projection (default: all)")


def _lease(args: argparse.Namespace) -> int:
    return _history(args, lambda a: a.lease(args.org, args.lease_id, args.as_of))


def _resource(args: argparse.Namespace) -> int:
    return _history(
        args, lambda a: a.resource(args.org, args.resource_type, args.resource_id, args.as_of)
    )


def _handoff(args: argparse.Namespace) -> int:
    return _history(args, lambda a: a.handoff(args.org, args.handoff_id, args.as_of))


def _history(args: argparse.Namespace, query: Callable[[Auditor], dict[str, Any]]) -> int:
    with _services(args) as services:
        try:
            answer = query(Auditor(services))
        except NotFound as exc:
            print(f"titen: {exc}", file=sys.stderr)
            return 1
    print(json.dumps(answer, indent=2))
    return 0


def _export(args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        services = stack.enter_context(_services(args))
        out: TextIO = sys.stdout
        if args.output:
            out = stack.enter_context(open(args.output, "w", encoding="ascii"))
        header = {
            "organization": args.org,
            "since": None if args.since is None else iso(args.since),
            "exported_at": iso(services.clock.now()),
        }
        last = ""
        for last in seal(header, Auditor(services).events(args.org, args.since)):
            out.write(last + "\n")
    end = json.loads(last)
    summary = f"exported {end['events']} events of {args.org}; chain head {end['hash']}"
    print(summary, file=sys.stderr)
    return 0


def _verify(args: argparse.Namespace) -> int:
    try:
        with open(args.file, encoding="utf-8", errors="replace") as lines:
            verdict = check(line.rstrip("\n") for line in lines)
    except OSError as exc:
        print(f"titen: {exc}", file=sys.stderr)
        return 2
    if not verdict.ok:
        print(f"titen: {args.file} line {verdict.bad_line}: {verdict.reason}", file=sys.stderr)
        return 1
    if args.head and args.head != verdict.head:
        print(
            f"titen: {args.file} is consistent but ends in {verdict.head}, not {args.head}: "
            "it is not the file that was exported",
            file=sys.stderr,
        )
        return 1
    print(f"ok: {verdict.events} events; chain head {verdict.head}")
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    with _services(args) as services:
        names = _names(services, args.name)
        for name in names:
            position = services.projector.rebuild(name)
            print(f"rebuilt {name} up to log position {position}")
    return 0 if names else 2


def _verify_projections(args: argparse.Namespace) -> int:
    with _services(args) as services:
        names = _names(services, args.name)
        for name in names:
            difference = services.projector.verify(name)
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


@contextmanager
def _services(args: argparse.Namespace) -> Iterator[Services]:
    """The services for one command, closed however it ends."""
    services = bootstrap(args.database, pool_size=2)
    try:
        yield services
    finally:
        services.close()


def _instant(text: str) -> datetime:
    try:
        return parse_iso(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an instant with a UTC offset, like 2026-07-30T10:52:00.000Z"
        ) from None
