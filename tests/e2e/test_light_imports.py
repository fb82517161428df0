"""What an agent and a quick command load: the client and `titen --help` stay free of the server.

Each check runs in a fresh interpreter, since this test process has loaded everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_SIDE = (
    "falcon",
    "waitress",
    "eventsourcing",
    "psycopg",
    "sqlite3",
    "jsonschema",
    "fastjsonschema",
)
# Which server-side modules a statement pulls in: a fact that no machine load changes. How fast
# the client imports follows from it, and is a timing, so it is not asserted here.
MEASURE = """
import json, sys
{statement}
print(json.dumps({{"loaded": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def loads(statement: str) -> dict:
    script = MEASURE.format(statement=statement, heavy=SERVER_SIDE)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_client_loads_nothing_of_the_server():
    assert loads("from titen.client import LeaseConflict, TitenClient")["loaded"] == []


def test_help_loads_no_database_driver_or_web_framework():
    statement = (
        "from titen.api.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert loads(statement)["loaded"] == []


def test_verifying_an_export_loads_no_database_driver_or_web_framework(tmp_path):
    export = tmp_path / "empty.jsonl"
    export.write_text("")
    statement = (
        "from titen.api.cli.main import main\n"
        f"try:\n    main(['audit', 'verify', {str(export)!r}])\nexcept SystemExit:\n    pass"
    )
    assert loads(statement)["loaded"] == []


def test_a_server_loads_the_mcp_sdk_and_the_nats_client_only_when_asked():
    """Half of a server's import time was the MCP SDK (with pydantic), paid by every server and
    every test server that never serves /mcp; the NATS client only the relay uses."""
    statement = (
        "import sys\n"
        "import titen.api.rest.server, titen.api.rest.app, titen.api.cli.serve\n"
        "print(json.dumps({'loaded': [m for m in ('mcp', 'pydantic', 'a2wsgi', 'anyio', 'nats')"
        " if m in sys.modules]}))\n"
        "sys.exit(0)"
    )
    assert loads(statement)["loaded"] == []
