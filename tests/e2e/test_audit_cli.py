"""`titen audit …` and `titen projections …` as real processes, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import threading

import pytest

from tests.support import TITEN, Http, Server, bearer, besides_database, create_key, titen
from titen.domain.clock import iso

ACQUIRE = {"resource_type": "deploy", "resource_id": "checkout", "purpose": "p", "ttl_seconds": 60}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """`titen` without a database (verify reads only a file)."""
    return subprocess.run([TITEN, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def recorded(services, client, clock, key):
    """Two terms and a resolved handoff in acme, and one lease in umbra."""
    alice = key("acme", "agent_alice")
    target = key("acme", "agent_target")
    umbra = key("umbra", "agent_alice")
    leases = [client.simulate_post("/v1/leases", json=ACQUIRE, headers=bearer(alice))]
    clock.advance(5)
    leases.append(client.simulate_post("/v1/leases", json=ACQUIRE, headers=bearer(alice)))
    client.simulate_post("/v1/leases", json=ACQUIRE, headers=bearer(umbra))
    handoff = client.simulate_post(
        "/v1/handoffs",
        json={"to_principal": "agent_target", "subject_id": "s"},
        headers=bearer(alice),
    ).json["data"]["handoff_id"]
    clock.advance(5)
    client.simulate_post(
        f"/v1/handoffs/{handoff}/resolve", json={"status": "rejected"}, headers=bearer(target)
    )
    return {
        "leases": [lease.json["data"]["lease_id"] for lease in leases],
        "handoff": handoff,
        "ops": key("acme", "ops", role="operator"),
    }


def test_audit_commands_answer_as_the_routes_do(database, client, recorded):
    ops = recorded["ops"]
    first, _ = recorded["leases"]
    cases = [
        (("audit", "lease", first), f"/v1/audit/leases/{first}", {}),
        (
            ("audit", "resource", "deploy", "checkout"),
            "/v1/audit/leases",
            {"resource_type": "deploy", "resource_id": "checkout"},
        ),
        (
            ("audit", "handoff", recorded["handoff"]),
            f"/v1/audit/handoffs/{recorded['handoff']}",
            {},
        ),
    ]
    for args, path, params in cases:
        for as_of in (None, "2026-07-30T10:48:20.000Z"):  # first lease ended, handoff pending
            extra = () if as_of is None else ("--as-of", as_of)
            printed = json.loads(titen(*args, "--org", "acme", *extra, database=database).stdout)
            query = params if as_of is None else {**params, "as_of": as_of}
            answered = client.simulate_get(path, params=query, headers=bearer(ops))
            assert printed == answered.json["data"], args


def test_audit_commands_report_what_is_not_there(database, recorded):
    first, _ = recorded["leases"]
    missing = titen("audit", "lease", first, "--org", "umbra", database=database, check=False)
    assert (missing.returncode, besides_database(missing.stderr)) == (
        1,
        f"titen: No lease {first}.\n",
    )
    bad = titen(
        "audit", "lease", first, "--org", "acme", "--as-of", "noon", database=database, check=False
    )
    assert bad.returncode == 2 and "'noon' is not an instant" in bad.stderr


def test_an_export_verifies_and_holds_only_the_organizations_events(database, recorded, tmp_path):
    path = tmp_path / "acme.jsonl"
    exported = titen("audit", "export", "--org", "acme", "--output", str(path), database=database)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    events = [line for line in lines if line["record"] == "event"]
    # registered + acquired, superseded + acquired; created, rejected
    assert [e["type"] for e in events] == [
        "lease.registered",
        "lease.acquired",
        "lease.superseded",
        "lease.acquired",
        "handoff.created",
        "handoff.rejected",
    ]
    assert all(e["payload"].get("organization", "acme") == "acme" for e in events)
    assert [e["position"] for e in events] == sorted(e["position"] for e in events)
    head = lines[-1]["hash"]
    assert exported.stdout == f"exported 6 events of acme; chain head {head}\n"
    assert exported.stderr == ""

    verified = run("audit", "verify", str(path))
    assert (verified.returncode, verified.stdout) == (0, f"ok: 6 events; chain head {head}\n")
    assert run("audit", "verify", str(path), "--head", head).returncode == 0
    other_head = run("audit", "verify", str(path), "--head", "0" * 64)
    assert other_head.returncode == 1 and "not the file that was exported" in other_head.stderr

    stdout = titen("audit", "export", "--org", "acme", database=database).stdout
    assert [json.loads(line)["record"] for line in stdout.splitlines()].count("event") == 6


def test_verify_names_the_first_line_not_as_exported(database, recorded, tmp_path):
    path = tmp_path / "acme.jsonl"
    titen("audit", "export", "--org", "acme", "--output", str(path), database=database)
    exported = path.read_text().splitlines()
    altered = list(exported)
    altered[3] = altered[3].replace('"lease.superseded"', '"lease.released"')
    removed = exported[:3] + exported[4:]
    reordered = [*exported[:3], exported[4], exported[3], *exported[5:]]
    for lines, reason in [(altered, "altered"), (removed, "out of place"), (reordered, "out")]:
        assert lines != exported
        path.write_text("\n".join(lines) + "\n")
        verified = run("audit", "verify", str(path))
        assert verified.returncode == 1
        assert verified.stderr.startswith(f"titen: {path} line 4: {reason}")


def test_export_since_keeps_only_later_events(database, services, recorded, clock, tmp_path):
    clock.advance(1)  # the events' instants are the services' clock's, as every instant is
    middle = clock.now()
    services.app.acquire_lease(
        organization="acme",
        holder="agent_alice",
        resource_type="deploy",
        resource_id="later",
        purpose="p",
        ttl_seconds=60,
    )
    output = titen("audit", "export", "--org", "acme", "--since", iso(middle), database=database)
    lines = [json.loads(line) for line in output.stdout.splitlines()]
    assert lines[0]["since"] == iso(middle)
    assert [line["type"] for line in lines if line["record"] == "event"] == [
        "lease.registered",
        "lease.acquired",
    ]
    path = tmp_path / "since.jsonl"
    path.write_text(output.stdout)
    assert run("audit", "verify", str(path)).returncode == 0


def test_projections_verify_finds_a_difference_and_rebuild_repairs_it(database, services, recorded):
    services.projector.catch_up()
    verified = titen("projections", "verify", database=database).stdout
    assert verified.count("ok: ") == len(services.projector.projections)
    with services.store.writing() as writer:
        writer.execute("UPDATE {lease_index} SET purpose = 'forged'")
    failed = titen("projections", "verify", database=database, check=False)
    assert failed.returncode == 1
    assert besides_database(failed.stderr).startswith("titen: lease_index at log position ")
    assert '"purpose": "forged"' in failed.stderr

    rebuilt = titen("projections", "rebuild", "lease_index", database=database)
    assert rebuilt.stdout.startswith("rebuilt lease_index up to log position ")
    assert titen("projections", "verify", "lease_index", database=database).returncode == 0
    unknown = titen("projections", "rebuild", "nope", database=database, check=False)
    assert unknown.returncode == 2 and "known: lease_index" in unknown.stderr


def test_a_rebuild_while_the_server_runs_is_invisible_to_its_readers(database):
    sender = create_key(database, "acme", "agent_sender")
    reader = create_key(database, "acme", "agent_reader")
    server = Server(database)
    try:
        http = Http(server.url)
        for n in range(40):
            created = http.request(
                "POST",
                "/v1/handoffs",
                {"to_principal": "agent_reader", "subject_id": f"s{n}"},
                key=sender,
            )
            assert created[0] == 201
        stop = threading.Event()
        seen: set[int] = set()
        statuses: list[int] = []

        def read() -> None:
            while not stop.is_set():
                status, body = http.request("GET", "/v1/handoffs?limit=500", key=reader)
                seen.add(len(body["data"]["handoffs"]) if status == 200 else -status)

        def write() -> None:
            n = 0
            while not stop.is_set():
                lease = {**ACQUIRE, "resource_id": f"r{n}"}
                statuses.append(http.request("POST", "/v1/leases", lease, key=sender)[0])
                n += 1

        threads = [threading.Thread(target=read), threading.Thread(target=write)]
        for thread in threads:
            thread.start()
        try:
            for _ in range(2):
                titen("projections", "rebuild", database=database)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    finally:
        server.stop()
    assert seen == {40}
    assert statuses and set(statuses) == {201}, server.log[-5000:]
    assert titen("projections", "verify", database=database).returncode == 0
