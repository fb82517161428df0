"""`titen serve`: the REST API under waitress."""

from __future__ import annotations

import argparse
from typing import Any

from titen.api.cli.options import database_command, open_services
from titen.api.rest import defaults


def add_commands(commands: Any) -> None:
    serve = database_command(commands, "serve", "serve the REST API", _serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8787)
    serve.add_argument(
        "--threads", type=int, default=defaults.THREADS, help="request worker threads"
    )
    serve.add_argument(
        "--max-subscribers",
        type=int,
        default=defaults.MAX_SUBSCRIBERS,
        help="open event streams and waiting long-polls served at once (each has its own thread)",
    )
    serve.add_argument(
        "--heartbeat-seconds",
        type=float,
        default=defaults.HEARTBEAT_SECONDS,
        help="comment line sent on a quiet event stream, to keep proxies from closing it",
    )


def _serve(args: argparse.Namespace) -> int:
    from titen.api.rest.server import serve

    with open_services(args, pool_size=args.threads + 2) as opened:
        serve(
            opened,
            args.host,
            args.port,
            args.threads,
            args.max_subscribers,
            args.heartbeat_seconds,
        )
    return 0
