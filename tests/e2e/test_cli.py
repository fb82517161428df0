"""The `titen` command line and a real `titen serve` process."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.support import TITEN, Http, Server, create_key, titen

ACQUIRE = {"resource_type": "deploy", "resource_id": "checkout", "purpose": "p", "ttl_seconds": 60}


def test_keys_create_prints_the_key_alone(database):
    result = titen("keys", "create", "--org", "acme", "--principal", "agent_a", database=database)
    assert re.fullmatch(r"titen_[0-9a-f]{48}\n", result.stdout)


def test_keys_create_without_principal_makes_an_agent_id_and_list_shows_prefixes(database):
    key = create_key(database, "acme", "agent_named")
    anonymous = titen("keys", "create", "--org", "acme", database=database).stdout.strip()
    listing = titen("keys", "list", "--org", "acme", database=database).stdout
    assert re.search(r"^agent_[0-9a-f]{32}\tagent\t", listing, re.MULTILINE)
    assert "agent_named\tagent\t" in listing
    assert key not in listing and anonymous not in listing
    assert key[:14] in listing
    assert titen("keys", "list", "--org", "umbra", database=database).stdout == ""


def test_keys_create_makes_a_dispatcher_and_list_shows_its_role(database):
    made = titen(
        "keys",
        "create",
        "--org",
        "acme",
        "--principal",
        "dispatch",
        "--role",
        "dispatcher",
        database=database,
    ).stdout.strip()
    listing = titen("keys", "list", "--org", "acme", database=database).stdout
    assert f"dispatch\tdispatcher\t{made[:14]}…\tactive" in listing.splitlines()
    refused = titen(
        "keys", "create", "--org", "acme", "--role", "boss", database=database, check=False
    )
    assert refused.returncode == 2
    assert "'agent', 'dispatcher', 'operator'" in refused.stderr


def test_a_principal_keeps_one_role(database):
    create_key(database, "acme", "ops", role="operator")
    refused = titen(
        "keys", "create", "--org", "acme", "--principal", "ops", database=database, check=False
    )
    assert refused.returncode == 2
    assert "already has the operator role" in refused.stderr


def test_a_revoked_key_is_refused_at_once_by_a_running_server(database):
    key = create_key(database, "acme", "agent_a")
    server = Server(database)
    try:
        http = Http(server.url, key)
        assert http.request("POST", "/v1/leases", ACQUIRE)[0] == 201
        titen("keys", "revoke", "--org", "acme", "--principal", "agent_a", database=database)
        status, body = http.request("POST", "/v1/leases", ACQUIRE)
        assert (status, body["error"]["code"]) == (401, "UNAUTHORIZED")
    finally:
        server.stop()
    listing = titen("keys", "list", "--org", "acme", database=database).stdout
    assert "revoked" in listing


def test_revoking_nothing_exits_non_zero(database):
    result = titen(
        "keys", "revoke", "--org", "acme", "--principal", "nobody", database=database, check=False
    )
    assert result.returncode == 1


def test_leases_survive_a_restart_and_each_request_is_logged(database):
    alice = create_key(database, "acme", "agent_a")
    bob = create_key(database, "acme", "agent_b")
    server = Server(database)
    lease = Http(server.url, alice).request("POST", "/v1/leases", ACQUIRE)[1]["data"]
    server.stop()
    log = server.log
    assert re.search(r'POST \\"/v1/leases\\" 201 \d+\.\dms', log)  # in a JSON line

    server = Server(database)
    try:
        status, body = Http(server.url, bob).request("POST", "/v1/leases", ACQUIRE)
        assert status == 409
        assert body["error"]["message"].endswith(f"until {lease['expires_at']}.")
        released = Http(server.url, alice).request("DELETE", f"/v1/leases/{lease['lease_id']}")
        assert released[0] == 200
    finally:
        server.stop()


def test_serve_defaults_to_titen_db_in_the_working_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TITEN_DATABASE_URL"}
    key = subprocess.run(
        [TITEN, "keys", "create", "--org", "acme"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert (tmp_path / "titen.db").exists()
    env["TITEN_DATABASE_URL"] = f"sqlite:///{tmp_path}/other.db"
    subprocess.run(
        [TITEN, "keys", "create", "--org", "acme"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert (tmp_path / "other.db").exists()
    assert key.startswith("titen_")


@pytest.mark.parametrize("url", ["mysql://x@y/z", "sqlite:///", "postgresql://localhost"])
def test_a_bad_database_url_is_a_clear_error(url):
    result = subprocess.run(
        [TITEN, "keys", "list", "--org", "acme", "--database", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("titen: ")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [
        ("--org", "my org/../x", "organization must be letters, digits, '.', '_', '~' or '-'"),
        ("--org", "", "organization must not be empty"),
        ("--principal", "agent\u200ba", "principal must not contain invisible format characters"),
        ("--principal", "agent_a\n", "principal must not contain control characters"),
        ("--principal", "   ", "principal must not be only whitespace"),
    ],
)
def test_keys_create_refuses_identifiers_as_the_api_does(database, option, value, reason):
    names = {"--org": "acme", "--principal": "agent_a", option: value}
    args = [part for pair in names.items() for part in pair]
    refused = titen("keys", "create", *args, database=database, check=False)
    assert refused.returncode == 2 and refused.stdout == ""
    assert f"titen: {reason}" in refused.stderr and "Traceback" not in refused.stderr
    assert titen("keys", "list", "--org", names["--org"], database=database).stdout == ""


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--webhook-workers", "0"],
        ["serve", "--webhook-workers", "-3"],
        ["serve", "--webhook-retry-seconds", "5,-1"],
        ["relay", "nats", "--stream", "a.b"],
        ["relay", "nats", "--name", "x*"],
        ["relay", "nats", "--subject-prefix", "titen.>"],
    ],
)
def test_bad_delivery_options_exit_2_before_doing_anything(tmp_path, command):
    database = f"sqlite:///{tmp_path}/titen.db"
    result = subprocess.run(
        [TITEN, *command, "--database", database], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "titen.db").exists()
