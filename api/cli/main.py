"""The `titen` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from titen.api.cli.audit import add_commands as add_audit_commands
from titen.api.rest.app import DEFAULT_HEARTBEAT_SECONDS, DEFAULT_MAX_SUBSCRIBERS
from titen.domain.ids import AGENT, new_id
from titen.service.bootstrap import Services, bootstrap
from titen.service.keys import ROLES, KeyRefused
from titen.storage.database import DEFAULT_URL, BadDatabaseURL

if TYPE_CHECKING:
    from titen.client import TitenClient


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        return args.run(args)
    except (BadDatabaseURL, KeyRefused) as exc:
        print(f"titen: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="titen", description=__doc__)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = _command(commands, "serve", "serve the REST API", _serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8787)
    serve.add_argument("--threads", type=int, default=16, help="request worker threads")
    serve.add_argument(
        "--max-subscribers",
        type=int,
        default=DEFAULT_MAX_SUBSCRIBERS,
        help="open event streams and waiting long-polls served at once (each has its own thread)",
    )
    serve.add_argument(
        "--heartbeat-seconds",
        type=float,
        default=DEFAULT_HEARTBEAT_SECONDS,
        help="comment line sent on a quiet event stream, to keep proxies from closing it",
    )

    _api_command(commands, "mcp", "serve the agent tools over MCP (stdio), via the API", _mcp)
    events = commands.add_parser("events", help="the committed event log").add_subparsers(
        required=True, metavar="ACTION"
    )
    tail = _api_command(events, "tail", "follow the log: one JSON object per line", _tail)
    tail.add_argument("--after", help="resume after this cursor (default: the beginning; latest)")
    tail.add_argument("--types", help="comma-separated, e.g. handoff.created,handoff.accepted")

    keys = commands.add_parser("keys", help="manage API keys").add_subparsers(
        required=True, metavar="ACTION"
    )
    create = _command(keys, "create", "create a key; prints the key alone", _keys_create)
    create.add_argument("--org", required=True)
    create.add_argument("--principal", help="default: a new agent_<32 hex> id")
    create.add_argument("--role", choices=ROLES, default="agent")
    listing = _command(keys, "list", "show principals and key prefixes", _keys_list)
    listing.add_argument("--org", required=True)
    revoke = _command(keys, "revoke", "revoke a principal's keys, or one key", _keys_revoke)
    revoke.add_argument("--org", required=True)
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("--principal")
    which.add_argument("--key-prefix", help="the prefix `keys list` shows")
    add_audit_commands(commands, _command)
    return parser


def _command(group, name: str, help_text: str, run) -> argparse.ArgumentParser:
    command = group.add_parser(name, help=help_text)
    command.add_argument(
        "--database",
        default=os.environ.get("TITEN_DATABASE_URL", DEFAULT_URL),
        help="sqlite:///PATH or postgresql://USER@HOST:PORT/DBNAME "
        "(default: $TITEN_DATABASE_URL, else sqlite:///titen.db)",
    )
    command.set_defaults(run=run)
    return command


def _api_command(group, name: str, help_text: str, run) -> argparse.ArgumentParser:
    """A command that calls the REST API under $TITEN_API_KEY; it never opens the database."""
    command = group.add_parser(name, help=help_text)
    command.add_argument(
        "--url",
        help="the REST API to call (default: $TITEN_URL, else http://127.0.0.1:8787); "
        "the key is $TITEN_API_KEY",
    )
    command.set_defaults(run=run)
    return command


def _open(args: argparse.Namespace, pool_size: int = 2) -> Services:
    return bootstrap(args.database, pool_size=pool_size)


def _serve(args: argparse.Namespace) -> int:
    from titen.api.rest.server import serve

    services = _open(args, pool_size=args.threads + 2)
    try:
        serve(
            services,
            args.host,
            args.port,
            args.threads,
            args.max_subscribers,
            args.heartbeat_seconds,
        )
    finally:
        services.close()
    return 0


def _client(args: argparse.Namespace) -> TitenClient:
    from titen.client import TitenClient

    try:
        return TitenClient.from_env(args.url)
    except ValueError as exc:  # no key, or a URL that is not http(s)
        print(f"titen: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _mcp(args: argparse.Namespace) -> int:
    from titen.client.mcp import serve

    with _client(args) as client:
        serve(client)
    return 0


def _tail(args: argparse.Namespace) -> int:
    import json

    from titen.client import TitenError

    types = [t for t in (args.types or "").split(",") if t]
    with _client(args) as client:
        try:
            for event in client.stream(after=args.after, types=types):
                print(json.dumps(event), flush=True)
        except TitenError as exc:
            print(f"titen: {exc.message}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
    return 0


def _keys_create(args: argparse.Namespace) -> int:
    services = _open(args)
    try:
        print(services.keys.create(args.org, args.principal or new_id(AGENT), args.role))
    finally:
        services.close()
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    services = _open(args)
    try:
        for row in services.keys.list(args.org):
            status = f"revoked {row['revoked_at']}" if row["revoked_at"] else "active"
            print(f"{row['principal']}\t{row['role']}\t{row['key_prefix']}…\t{status}")
    finally:
        services.close()
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    services = _open(args)
    try:
        count = services.keys.revoke(args.org, principal=args.principal, key_prefix=args.key_prefix)
    finally:
        services.close()
    print(f"revoked {count} key(s)", file=sys.stderr)
    return 0 if count else 1
