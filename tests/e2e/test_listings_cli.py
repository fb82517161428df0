"""`titen leases list` and `titen handoffs list` against a real server: one JSON object per line,
every page followed, the route's roles and refusals."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support import TITEN, Http, create_key
from titen.service.bootstrap import bootstrap
from titen.service.roles import AGENT, ROLES

pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]


@pytest.fixture(scope="module")
def listing(module_server):
    """The module's server and keys of two agents and an operator."""
    keys = {
        name: create_key(module_server.database, "acme", name, role)
        for name, role in (("alice", "agent"), ("bob", "agent"), ("ops", "operator"))
    }
    return module_server, keys


def run(listing, who: str, *args: str) -> subprocess.CompletedProcess[str]:
    server, keys = listing
    env = {**os.environ, "TITEN_API_KEY": keys[who], "TITEN_URL": server.url}
    return subprocess.run(
        [TITEN, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def lines(done: subprocess.CompletedProcess[str]) -> list[dict]:
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_leases_list_follows_every_page_newest_first_by_role(listing):
    server, _ = listing
    services = bootstrap(server.database, pool_size=2)  # in this process: 503 quick acquires
    try:
        made = [
            services.app.acquire_lease(
                organization="acme",
                holder="alice" if n % 2 else "bob",
                resource_type="cli",
                resource_id=f"r{n}",
                purpose="p",
                ttl_seconds=600,
            ).value.lease_id
            for n in range(503)  # more than one page of 500
        ]
    finally:
        services.close()
    every = lines(run(listing, "ops", "leases", "list", "--resource-type", "cli"))
    assert [lease["lease_id"] for lease in every] == made[::-1]
    assert set(every[0]) == {
        "lease_id",
        "resource_type",
        "resource_id",
        "holder",
        "purpose",
        "acquired_at",
        "expires_at",
        "fencing_token",
        "expired",
    }
    assert every[0]["expires_at"].endswith("Z")
    alices = lines(run(listing, "alice", "leases", "list", "--resource-type", "cli"))
    assert {lease["holder"] for lease in alices} == {"alice"} and len(alices) == 251
    three = lines(run(listing, "ops", "leases", "list", "--holder", "bob", "--limit", "3"))
    assert [lease["lease_id"] for lease in three] == made[0::2][::-1][:3]


def test_handoffs_list_shows_the_inbox_or_the_organizations_pending(listing):
    server, keys = listing
    body = {"to_principal": "bob", "subject_id": "s1", "message": "over to you"}
    status, created = Http(server.url, keys["alice"]).request("POST", "/v1/handoffs", body)
    assert status == 201
    handoff_id = created["data"]["handoff_id"]
    (mine,) = lines(run(listing, "bob", "handoffs", "list"))
    assert mine["handoff_id"] == handoff_id and "resolved_at" not in mine
    assert lines(run(listing, "alice", "handoffs", "list")) == []
    every = lines(run(listing, "ops", "handoffs", "list", "--scope", "organization"))
    assert [h["handoff_id"] for h in every] == [handoff_id]
    to_ops = run(
        listing, "ops", "handoffs", "list", "--scope", "organization", "--to-principal", "ops"
    )
    assert lines(to_ops) == []


def test_an_agent_asking_for_the_organizations_handoffs_is_told_the_services_refusal(listing):
    refused = run(listing, "alice", "handoffs", "list", "--scope", "organization")
    assert refused.returncode == 1 and refused.stdout == ""
    readers = " or ".join(role for role in ROLES if role != AGENT)
    assert refused.stderr == f"titen: The organization's handoffs need the {readers} role.\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("leases", "list", "--limit", "0"), "'0' is not a whole number from 1 up"),
        (
            ("handoffs", "list", "--to-principal", "bob"),
            "--to-principal needs --scope organization",
        ),
        (("handoffs", "list", "--scope", "everyone"), "invalid choice: 'everyone'"),
    ],
)
def test_bad_options_are_one_line_and_status_2(listing, args, says):
    done = run(listing, "ops", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert says in done.stderr and done.stderr.count("\n") == 1
