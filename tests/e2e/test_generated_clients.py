"""Clients generated from the served `/openapi.json` by tools nobody here wrote run the seed's flow
against a real server, and Redocly's recommended rules find nothing in the document.

TypeScript: openapi-typescript's types and openapi-fetch's calls, `tsc --strict` clean
(tests/e2e/typescript/, pinned in its package.json; npm installs them from its cache, which
.ci/run fills). Python: openapi-python-client (pinned in the dev extras). One server for the
module, on SQLite: the clients add no backend-specific behaviour (as tests/e2e/test_client.py).
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2
import pytest

from tests.support import Server, create_key

NPM = shutil.which("npm")
NODE = shutil.which("node")
TYPESCRIPT = Path(__file__).parent / "typescript"
REDOCLY = "@redocly/cli@2.77.0"  # .ci/run fetches the same
GENERATOR = Path(sys.executable).parent / "openapi-python-client"
PACKAGE = "titen_generated"
TOOL_BOUND = 600
"""A bound for a hung tool, not a pace: npm may have to fetch what its cache lacks."""
needs_npm = pytest.mark.skipif(NPM is None or NODE is None, reason="no npm and node")


@dataclass
class Site:
    url: str
    keys: dict[str, str]
    """`<organization> <principal>`: agent_a and agent_b of typescript and of python."""
    document: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("generated-clients")
    database = f"sqlite:///{folder}/titen.db"
    keys = {  # an organization per client, so that each reads its own flow's events
        f"{org} {name}": create_key(database, org, name)
        for org in ("typescript", "python")
        for name in ("agent_a", "agent_b")
    }
    server = Server(database)
    try:
        document = folder / "openapi.json"
        document.write_text(httpx2.get(server.url + "/openapi.json", timeout=30).text)
        yield Site(server.url, keys, document)
    finally:
        server.stop()
    assert '"status": 500' not in server.log, server.log[-5000:]


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A tool that ran to success; its own words in the failure when it did not."""
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TOOL_BOUND,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@needs_npm
def test_redocly_recommended_rules_find_nothing_in_the_document(site, tmp_path):
    told = run(
        NPM, "exec", "--yes", f"--package={REDOCLY}", "--", "redocly", "lint",
        "--extends=recommended", "--format=json", site.document,
        cwd=tmp_path,
    )  # fmt: skip
    report = json.loads(told.stdout)
    assert report["totals"] == {"errors": 0, "warnings": 0, "ignored": 0}, report["problems"]


@needs_npm
def test_a_typescript_client_runs_the_seed_flow_type_checked(site, tmp_path):
    for name in ("package.json", "tsconfig.json", "flow.ts"):
        shutil.copy(TYPESCRIPT / name, tmp_path)
    keys = {"agentA": site.keys["typescript agent_a"], "agentB": site.keys["typescript agent_b"]}
    (tmp_path / "config.ts").write_text(
        f"export const url = {json.dumps(site.url)};\nexport const keys = {json.dumps(keys)};\n"
    )
    run(NPM, "install", "--prefer-offline", "--no-audit", "--no-fund", cwd=tmp_path)
    bins = tmp_path / "node_modules" / ".bin"
    run(bins / "openapi-typescript", site.document, "--output", "schema.ts", cwd=tmp_path)
    run(bins / "tsc", "--strict", "--noEmit", "-p", ".", cwd=tmp_path)
    run(bins / "tsc", "-p", ".", "--noCheck", cwd=tmp_path)  # checked above: emit alone
    told = json.loads(run(NODE, tmp_path / "built" / "flow.js", cwd=tmp_path).stdout)
    kinds = [line.split(" ")[0] for line in told["events"]]
    assert kinds == ["lease.acquired", "handoff.created", "handoff.accepted"], told
    assert told["mcp"] == "A valid API key is required: authorization: Bearer <key>."


def test_a_python_client_runs_the_seed_flow(site, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"package_name_override": PACKAGE, "post_hooks": []}))
    told = run(
        GENERATOR, "generate", "--path", site.document, "--config", config,
        "--meta", "none", "--output-path", tmp_path / PACKAGE,
        cwd=tmp_path,
    )  # fmt: skip
    said = told.stdout + told.stderr
    assert "warning" not in said.lower(), said  # every schema became a model
    sys.path.insert(0, str(tmp_path))
    try:
        kinds = python_flow(site)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]
    assert kinds == ["LeaseAcquiredEvent", "HandoffCreatedEvent", "HandoffAcceptedEvent"]


def python_flow(site: Site) -> list[str]:
    """The seed's flow through the generated package; the events' classes, in order."""
    package = importlib.import_module(PACKAGE)
    models = importlib.import_module(f"{PACKAGE}.models")

    def api(operation: str) -> Any:
        return importlib.import_module(f"{PACKAGE}.api.default.{operation}").sync_detailed

    agent_a = package.AuthenticatedClient(base_url=site.url, token=site.keys["python agent_a"])
    agent_b = package.AuthenticatedClient(base_url=site.url, token=site.keys["python agent_b"])
    lease = models.AcquireLeaseBody(
        resource_type="deploy",
        resource_id="checkout-service",
        purpose="run rollback smoke",
        ttl_seconds=600,
    )
    acquired = api("acquire_lease")(client=agent_a, body=lease)
    assert acquired.status_code == 201, acquired.content
    lease_id = acquired.parsed.data.lease_id
    refused(models, api("acquire_lease")(client=agent_b, body=lease), 409, "CONFLICT")
    released = api("release_lease")(lease_id, client=agent_a)
    assert released.status_code == 200 and released.parsed.data.lease_id == lease_id
    refused(models, api("release_lease")(lease_id, client=agent_a), 404, "NOT_FOUND")

    handoff = models.CreateHandoffBody(
        to_principal="agent_b", subject_id="user_rama", message="Smoke passed."
    )
    sent = api("create_handoff")(client=agent_a, body=handoff)
    assert sent.status_code == 201, sent.content
    handoff_id = sent.parsed.data.handoff_id
    inbox = api("list_inbox")(client=agent_b).parsed.data.handoffs
    assert handoff_id in [item.handoff_id for item in inbox]
    accept = models.ResolveHandoffBody(status=models.ResolveHandoffBodyStatus.ACCEPTED)
    resolved = api("resolve_handoff")(handoff_id, client=agent_b, body=accept)
    assert resolved.status_code == 200 and resolved.parsed.data.status == "accepted"
    again = api("resolve_handoff")(handoff_id, client=agent_b, body=accept)
    refused(models, again, 404, "NOT_FOUND")

    events = api("list_events")(client=agent_a).parsed.data.events
    lease_event, *_ = events
    assert isinstance(lease_event, models.LeaseAcquiredEvent)
    assert lease_event.data.fencing_token == 1  # parsed into its type's own data
    return [type(event).__name__ for event in events]


def refused(models: ModuleType, answer: Any, status: int, code: str) -> None:
    """One error type to catch for every refusal, its code from the one enum."""
    assert answer.status_code == status, answer.content
    assert isinstance(answer.parsed, models.Error)
    assert answer.parsed.error.code == models.ErrorCode(code)
