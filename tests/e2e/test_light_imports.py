"""What an agent and a quick command load: the client and `titen --help` stay free of the server.

Each check runs in a fresh interpreter, since this test process has loaded everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import Http, Server, create_key

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


def test_checking_the_serve_flags_loads_no_metrics_library():
    """A server of several workers sets prometheus-client's multiprocess directory up before
    anything imports it (api/rest/prefork.py), so `titen serve` must not import it while it
    reads its flags: checking an origin once imported the web app (the `--cors-origin` check),
    and the default server with that flag exited at once."""
    flags = [
        *("serve", "--cors-origin", "http://app.example", "--webhook-retry-seconds", "1,2"),
        *("--webhook-workers", "2", "--metrics-port", "9999", "--log-format", "text"),
        *("--max-subscribers", "8", "--max-subscribers-per-org", "4", "--pool-size", "3"),
        *("--max-subscribers-per-principal", "2", "--allow-private-webhooks", "-v"),
    ]
    statement = (
        "import sys\n"
        "from titen.api.cli import main, serve\n"
        f"serve._settings(main._parser().parse_args({flags!r}))\n"
        "print(json.dumps({'loaded': [m for m in ('prometheus_client',) if m in sys.modules]}))\n"
        "sys.exit(0)"
    )
    assert loads(statement)["loaded"] == []


def test_only_a_server_on_postgresql_loads_the_postgresql_driver(database):
    """psycopg and the library's PostgreSQL module were a fifth of a server's start on SQLite
    and half of a command's (storage/outages.py, projections/postgres_store.py). Read from the
    running server's memory map once it has written and refused: psycopg's compiled part and
    libpq are shared libraries, mapped when psycopg is imported (as on PostgreSQL)."""
    alice = create_key(database, "acme", "alice")
    create_key(database, "acme", "bob")  # a handoff's target is a principal of its organization
    server = Server(database)
    try:
        http = Http(server.url, alice)
        lease = {"resource_type": "deploy", "resource_id": "a", "purpose": "p", "ttl_seconds": 60}
        assert http.request("POST", "/v1/leases", lease)[0] == 201
        status, body = http.request(
            "POST", "/v1/handoffs", {"to_principal": "bob", "subject_id": "s"}
        )
        assert status == 201, body
        assert http.request("POST", "/v1/leases", {"resource_type": ""})[0] == 400
        maps = Path(f"/proc/{server.process.pid}/maps").read_text()
    finally:
        server.stop()
    assert ("libpq" in maps) == database.startswith("postgresql:")
    assert ("psycopg" in maps) == database.startswith("postgresql:")
