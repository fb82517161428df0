"""The live API keeps its documented contract: schemathesis against a real `titen serve`.

Every operation of /openapi.json (itself included), with positive and negative data, the
stateful links (acquire → get/release, create → get/resolve) and the checks named in
schemathesis.toml, on SQLite and on PostgreSQL. Zero failures: what it finds is fixed in the
code, not excluded.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support import Http, Server, create_key

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CONFIG = Path(__file__).parents[2] / "schemathesis.toml"
HOOKS = Path(__file__).with_name("fuzz_hooks.py")


def test_schemathesis_finds_nothing_on_the_live_api(database, tmp_path):
    operator = create_key(database, "acme", "ops", "operator")  # reaches the audit routes too
    recipient = create_key(database, "acme", "agent_b")  # as schemathesis.toml names it
    server = Server(database, 8, "--allow-private-webhooks")  # webhooks to loopback
    try:
        acquired, _ = Http(server.url, operator).request(
            "POST",
            "/v1/leases",
            {"resource_type": "seed", "resource_id": "1", "purpose": "seed", "ttl_seconds": 60},
        )
        assert acquired == 201  # the log is not empty: a long-poll from the start answers at once
        document = Http(server.url).request("GET", "/openapi.json")[1]
        # Read from a file, so /openapi.json is one more operation to test, not the schema's home.
        schema = tmp_path / "openapi.json"
        schema.write_text(json.dumps(document))
        run = subprocess.run(
            [
                str(SCHEMATHESIS),
                "--config-file",
                str(CONFIG),
                "run",
                str(schema),
                "--url",
                server.url,
            ],
            env={
                **os.environ,
                "TITEN_FUZZ_OPERATOR_KEY": operator,
                "TITEN_FUZZ_RECIPIENT_KEY": recipient,
                "SCHEMATHESIS_HOOKS": str(HOOKS),
            },
            capture_output=True,
            text=True,
            timeout=540,
            cwd=tmp_path,
        )
    finally:
        server.stop()
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-30_000:]
    operations = sum(len(item) for item in document["paths"].values())
    assert re.search(rf"Tested: {operations}\b", output), output[-5_000:]
    links = sum(
        len(response.get("links", {}))
        for item in document["paths"].values()
        for operation in item.values()
        for response in operation["responses"].values()
    )
    assert re.search(rf"API Links:\s+{links} covered / {links} selected", output), output[-5_000:]
