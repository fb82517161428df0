"""`titen mcp` and `titen events tail`: the agent's side, calling the REST API under its key."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from titen.api.cli.options import api_command

if TYPE_CHECKING:
    from titen.client import TitenClient


def add_commands(commands: Any) -> None:
    mcp = api_command(commands, "mcp", "serve the agent tools over MCP (stdio), via the API", _mcp)
    mcp.set_defaults(until_stopped=True)
    events = commands.add_parser("events", help="the committed event log").add_subparsers(
        required=True, metavar="ACTION"
    )
    tail = api_command(events, "tail", "follow the log: one JSON object per line", _tail)
    tail.add_argument(
        "--after",
        help="resume after this cursor, or `latest` for new events only (default: the beginning)",
    )
    tail.add_argument(
        "--types",
        help="comma-separated, e.g. handoff.created,handoff.accepted (default: every type)",
    )


def client_from_env(args: argparse.Namespace) -> TitenClient:
    """The client of `--url` (else $TITEN_URL) under $TITEN_API_KEY; a usage error without."""
    from titen.client import TitenClient

    try:
        return TitenClient.from_env(args.url)
    except ValueError as exc:  # no key, or a URL that is not http(s)
        print(f"titen: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _mcp(args: argparse.Namespace) -> int:
    from titen.client.mcp import serve

    with client_from_env(args) as client:
        serve(client)
    return 0


def _tail(args: argparse.Namespace) -> int:
    import json

    from titen.client import TitenError

    types = [t for t in (args.types or "").split(",") if t]
    with client_from_env(args) as client:
        try:
            for event in client.stream(after=args.after, types=types):
                print(json.dumps(event), flush=True)
        except TitenError as exc:
            print(f"titen: {exc.message}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
    return 0
