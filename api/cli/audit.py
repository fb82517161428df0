"""`titen audit …`: the record, for someone with database access.

audit lease|resource|handoff   one history, as the audit routes answer it (JSON on stdout)
audit export                   every event of an organization as hash-chained JSON Lines
audit verify FILE              recompute an export's chain; non-zero at the first bad line

Exit status: 0 done, 1 not found or not as recorded, 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from titen.api.cli.audit_chain import check, seal
from titen.api.cli.options import command, database_command, open_services
from titen.api.cli.progress import Report, progress
from titen.domain.clock import iso, parse_iso
from titen.domain.errors import NotFound

"""Terms read per page: the routes' largest `limit`."""

if TYPE_CHECKING:
    from titen.service.auditor import Auditor


def add_commands(commands: Any) -> None:
    audit = commands.add_parser("audit", help="histories and exports from the event log")
    actions = audit.add_subparsers(required=True, metavar="ACTION")
    lease = database_command(actions, "lease", "one lease's term and events", _lease)
    lease.add_argument("lease_id")
    resource = database_command(actions, "resource", "every term on a resource", _resource)
    resource.add_argument("resource_type")
    resource.add_argument("resource_id")
    handoff = database_command(actions, "handoff", "one handoff's state and events", _handoff)
    handoff.add_argument("handoff_id")
    for parser in (lease, resource, handoff):
        parser.add_argument("--org", required=True)
        parser.add_argument(
            "--as-of", type=_instant, help="answer as of this instant (default: now)"
        )
    export = database_command(
        actions, "export", "an organization's events as chained JSON Lines", _export
    )
    export.add_argument("--org", required=True)
    export.add_argument(
        "--since",
        type=_instant,
        help="only events recorded from this instant (default: all of them)",
    )
    export.add_argument(
        "--output",
        help="a file to write, and then a summary with the chain head on stdout "
        "(default: the export on stdout, the summary with -v on stderr)",
    )
    verify = command(actions, "verify", "check an export's hash chain", _verify)
    verify.add_argument("file")
    verify.add_argument(
        "--head",
        help="the chain head recorded at export, to compare with (default: none, the file's "
        "own chain is checked)",
    )


def _lease(args: argparse.Namespace) -> int:
    return _history(args, lambda a: a.lease(args.org, args.lease_id, args.as_of))


def _resource(args: argparse.Namespace) -> int:
    return _history(
        args, lambda a: a.every_term(args.org, args.resource_type, args.resource_id, args.as_of)
    )


def _handoff(args: argparse.Namespace) -> int:
    return _history(args, lambda a: a.handoff(args.org, args.handoff_id, args.as_of))


def _history(args: argparse.Namespace, query: Callable[[Auditor], dict[str, Any]]) -> int:
    with open_services(args) as services:
        try:
            answer = query(services.auditor)
        except NotFound as exc:
            print(f"titen: {exc}", file=sys.stderr)
            return 1
    print(json.dumps(answer, indent=2))
    return 0


def _export(args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        services = stack.enter_context(open_services(args))
        out: TextIO = sys.stdout
        if args.output:
            out = stack.enter_context(open(args.output, "w", encoding="ascii"))
        header = {
            "organization": args.org,
            "since": None if args.since is None else iso(args.since),
            "exported_at": iso(services.clock.now()),
        }
        log_end = services.app.recorder.max_notification_id() or 0
        report = stack.enter_context(progress(f"export {args.org}", log_end, "events"))
        last = ""
        for last in seal(header, _reporting(services.auditor.events(args.org, args.since), report)):
            out.write(last + "\n")
        report(log_end)  # the whole log was read, whether or not its last events were ours
    end = json.loads(last)
    summary = f"exported {end['events']} events of {args.org}; chain head {end['hash']}"
    if args.output:
        print(summary)
    elif args.verbose:  # stdout is the export itself
        print(f"titen: {summary}", file=sys.stderr)
    return 0


def _verify(args: argparse.Namespace) -> int:
    with (
        open(args.file, encoding="utf-8", errors="replace") as lines,
        progress("verify", _line_count(args.file), "lines") as report,
    ):
        verdict = check(_counting(lines, report))  # a file that cannot be read: see `main`
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


def _reporting(events: Iterator[dict[str, Any]], report: Report) -> Iterator[dict[str, Any]]:
    """The events, telling `report` each one's log position as it passes."""
    for event in events:
        report(event["position"])
        yield event


def _counting(lines: Iterable[str], report: Report) -> Iterator[str]:
    """The file's lines without their line breaks, telling `report` how many have passed."""
    for number, line in enumerate(lines, start=1):
        report(number)
        yield line.rstrip("\n")


def _line_count(path: str) -> int | None:
    """How many lines the file has, for the bar's end: only counted when a bar is drawn."""
    if not sys.stderr.isatty():
        return None
    with open(path, "rb") as data:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: data.read(1 << 20), b""))


def _instant(text: str) -> datetime:
    try:
        return parse_iso(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an instant with a UTC offset, like 2026-07-30T10:52:00.000Z"
        ) from None
