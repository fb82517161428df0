"""`titen leases list` and `titen handoffs list`: what is held and what waits, via the API.

Each prints one JSON object per line, as the route shows it, following `next_cursor` to the end
(or until `--limit` items). Who sees what is the route's: an agent's key lists its own leases
and its inbox; a dispatcher's or an operator's the organization's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from datetime import datetime
from typing import Any

from titen.api.cli.options import api_command

PAGE = 500
"""Items asked for per request: the routes' largest `limit`."""


def add_commands(commands: Any) -> None:
    leases = commands.add_parser("leases", help="the organization's held leases")
    held = api_command(
        leases.add_subparsers(required=True, metavar="ACTION"),
        "list",
        "unreleased leases, newest first: one JSON object per line",
        _leases,
    )
    held.add_argument("--resource-type", help="only this resource type (default: every type)")
    held.add_argument("--holder", help="only this holder's (default: every holder)")
    _limit(held)
    handoffs = commands.add_parser("handoffs", help="pending handoffs")
    pending = api_command(
        handoffs.add_subparsers(required=True, metavar="ACTION"),
        "list",
        "pending handoffs, oldest first: one JSON object per line",
        _handoffs,
    )
    pending.add_argument(
        "--scope",
        choices=["organization"],
        help="organization: every pending handoff of the organization, for a dispatcher or an "
        "operator (default: the caller's inbox)",
    )
    pending.add_argument(
        "--to-principal", help="with --scope organization, only this recipient's (default: all)"
    )
    _limit(pending)


def _limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit", type=_positive, help="stop after this many (default: every one there is)"
    )


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 up")
    return int(text)


def _leases(args: argparse.Namespace) -> int:
    from titen.api.cli.agent import client_from_env

    with client_from_env(args) as client:
        return _print_all(
            args.limit,
            lambda limit, cursor: client.held_leases(
                resource_type=args.resource_type, holder=args.holder, limit=limit, cursor=cursor
            ),
            "leases",
        )


def _handoffs(args: argparse.Namespace) -> int:
    from titen.api.cli.agent import client_from_env

    if args.to_principal is not None and args.scope is None:
        print("titen: --to-principal needs --scope organization", file=sys.stderr)
        return 2
    with client_from_env(args) as client:
        if args.scope is None:
            return _print_all(
                args.limit,
                lambda limit, cursor: client.inbox(limit=limit, cursor=cursor),
                "handoffs",
            )
        return _print_all(
            args.limit,
            lambda limit, cursor: client.organization_handoffs(
                to_principal=args.to_principal, limit=limit, cursor=cursor
            ),
            "handoffs",
        )


def _print_all(wanted: int | None, page: Callable[[int, str | None], Any], field: str) -> int:
    """Print every item of every page, up to `wanted`; the service's refusal as one line."""
    from titen.client import TitenError

    try:
        for item in _items(wanted, page, field):
            print(json.dumps(_wire(item)), flush=True)
    except TitenError as exc:
        print(f"titen: {exc.message}", file=sys.stderr)
        return 1
    return 0


def _items(wanted: int | None, page: Callable[[int, str | None], Any], field: str) -> Iterator[Any]:
    cursor = None
    left = wanted
    while left is None or left > 0:
        answer = page(PAGE if left is None else min(PAGE, left), cursor)
        items = getattr(answer, field)
        yield from items
        if left is not None:
            left -= len(items)
        cursor = answer.next_cursor
        if cursor is None:
            return


def _wire(record: Any) -> dict[str, Any]:
    """A client record as the route wrote it: instants in the service's form, and no
    `resolved_at` on a pending handoff (the inbox item has none)."""
    from titen.domain.clock import iso

    fields = {
        name: iso(value) if isinstance(value, datetime) else value
        for name, value in asdict(record).items()
    }
    if fields.get("resolved_at", "") is None:
        del fields["resolved_at"]
    return fields
