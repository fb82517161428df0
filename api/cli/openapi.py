"""`titen openapi`: print the OpenAPI document the server serves at /openapi.json."""

from __future__ import annotations

import argparse
import json
from typing import Any

from titen.api.cli.options import command


def add_commands(commands: Any) -> None:
    command(
        commands,
        "openapi",
        "print the OpenAPI 3.1 document of the REST API (no database needed)",
        _print,
    )


def _print(args: argparse.Namespace) -> int:
    from titen.api.rest.app import openapi

    print(json.dumps(openapi(), indent=2))
    return 0
