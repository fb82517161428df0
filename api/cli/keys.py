"""`titen keys create|list|revoke`: API keys, for someone with database access."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from titen.api.cli.options import database_command, open_services
from titen.domain.ids import AGENT, new_id
from titen.service.roles import AGENT as AGENT_ROLE
from titen.service.roles import ROLES


def add_commands(commands: Any) -> None:
    keys = commands.add_parser("keys", help="manage API keys").add_subparsers(
        required=True, metavar="ACTION"
    )
    create = database_command(keys, "create", "create a key; prints the key alone", _create)
    create.add_argument("--org", required=True)
    create.add_argument(
        "--principal", help="who the key acts for (default: a new agent_<32 hex> id)"
    )
    create.add_argument(
        "--role", choices=ROLES, default=AGENT_ROLE, help="what it may do (default: %(default)s)"
    )
    listing = database_command(keys, "list", "show principals and key prefixes", _list)
    listing.add_argument("--org", required=True)
    revoke = database_command(keys, "revoke", "revoke a principal's keys, or one key", _revoke)
    revoke.add_argument("--org", required=True)
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("--principal")
    which.add_argument("--key-prefix", help="the prefix `keys list` shows (default: none)")


def _create(args: argparse.Namespace) -> int:
    with open_services(args) as opened:
        print(opened.keys.create(args.org, args.principal or new_id(AGENT), args.role))
    return 0


def _list(args: argparse.Namespace) -> int:
    with open_services(args) as opened:
        for row in opened.keys.list(args.org):
            status = f"revoked {row['revoked_at']}" if row["revoked_at"] else "active"
            print(f"{row['principal']}\t{row['role']}\t{row['key_prefix']}…\t{status}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    with open_services(args) as opened:
        count = opened.keys.revoke(args.org, principal=args.principal, key_prefix=args.key_prefix)
    if not count:
        which = f"principal {args.principal}" if args.principal else f"prefix {args.key_prefix}"
        print(f"titen: {args.org} has no unrevoked key of {which}", file=sys.stderr)
        return 1
    print(f"revoked {count} key(s)")
    return 0
