"""`titen relay nats`: publish the committed log of every organization to NATS JetStream."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from titen.api.cli.options import database_command, open_services

log = logging.getLogger("titen.relay")


def add_commands(commands: Any) -> None:
    relay = commands.add_parser("relay", help="publish the committed log downstream")
    targets = relay.add_subparsers(required=True, metavar="TARGET")
    nats = database_command(targets, "nats", "publish every event to NATS JetStream", _nats)
    nats.set_defaults(until_stopped=True)
    nats.add_argument(
        "--url", default="nats://127.0.0.1:4222", help="the NATS server (default: %(default)s)"
    )
    nats.add_argument(
        "--stream",
        default="TITEN",
        help="the JetStream stream, made if missing (default: %(default)s)",
    )
    nats.add_argument(
        "--subject-prefix",
        default="titen",
        help="subjects are <prefix>.<organization>.<type> (default: %(default)s; docs/relay.md)",
    )
    nats.add_argument(
        "--name",
        default="default",
        help="this relay's durable position in the titen database (default: %(default)s)",
    )


def _nats(args: argparse.Namespace) -> int:
    from titen.service.background import relaying
    from titen.service.relay import RelaySettings
    from titen.service.relay_names import consumer_name

    settings = RelaySettings(args.url, args.stream, args.subject_prefix, args.name)
    try:
        settings.check()
    except ValueError as refused:
        print(f"titen: {refused}", file=sys.stderr)
        return 2
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    with open_services(args, pool_size=4) as services:
        background = relaying(services, settings)
        background.start()
        name = consumer_name(settings.name)
        log.info("relaying to %s stream %s as %s", settings.url, settings.stream, name)
        try:
            while not stopping.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        log.info("stopping: finishing the publish in flight")
        background.stop()
    return 0
