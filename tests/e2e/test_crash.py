"""A server killed with SIGKILL under load: nothing acknowledged is lost, and no committed event
lacks its read-model rows (they commit in the same transaction, docs/leases.md)."""

from __future__ import annotations

import http.client
import sqlite3
import threading
from contextlib import closing

import psycopg

from tests.support import Http, Server, eventually
from titen.service.bootstrap import bootstrap
from titen.storage.database import parse

CLIENTS = 8


def acquire_until_it_dies(server: Server, key: str, client: int, acked: list[str]) -> None:
    api = Http(server.url, key)
    for n in range(100_000):
        body = {"resource_type": "job", "resource_id": f"c{client}-{n}", "purpose": "p"}
        try:
            status, answer = api.request("POST", "/v1/leases", {**body, "ttl_seconds": 600})
        except (OSError, http.client.HTTPException):
            return  # the server is gone (an answer cut short was never acknowledged)
        if status == 201:
            acked.append(answer["data"]["lease_id"])


def log_end_and_positions(url: str) -> tuple[int, dict[str, int]]:
    """The log's last position and every projection's tracking position, read raw (opening
    the store with `bootstrap` would first catch the projections up)."""
    database = parse(url)
    if database.kind == "sqlite":
        with closing(sqlite3.connect(database.path)) as conn:
            end = conn.execute("SELECT MAX(rowid) FROM stored_events").fetchone()[0]
            rows = conn.execute("SELECT application_name, notification_id FROM tracking")
            return end, dict(rows.fetchall())
    events, tracking = (
        f'"{database.schema}".{table}' for table in ("titen_events", "titen_tracking")
    )
    with psycopg.connect(database.conninfo()) as conn:
        end = conn.execute(f"SELECT MAX(notification_id) FROM {events}").fetchone()[0]
        rows = conn.execute(f"SELECT application_name, notification_id FROM {tracking}")
        return end, dict(rows.fetchall())


def test_a_kill_under_load_loses_no_acknowledged_command_and_no_read_model_row(database):
    setup = bootstrap(database, pool_size=2)
    key = setup.keys.create("acme", "agent_a", "agent")
    projections = list(setup.projector.projections)
    setup.close()
    server = Server(database, 8)
    acked: list[str] = []
    clients = [
        threading.Thread(target=acquire_until_it_dies, args=(server, key, n, acked))
        for n in range(CLIENTS)
    ]
    for thread in clients:
        thread.start()
    eventually(lambda: len(acked) >= 50, "the server under load", timeout=60)
    server.kill()
    for thread in clients:
        thread.join(timeout=30)
    assert len(acked) > 20  # it was under load

    end, positions = log_end_and_positions(database)
    assert {name: positions.get(name) for name in projections} == dict.fromkeys(projections, end)

    reopened = bootstrap(database, pool_size=2)
    try:
        for lease_id in acked:
            assert reopened.lease_directory.find(lease_id) is not None, lease_id
            assert reopened.lease_index.find(lease_id) is not None, lease_id
        for name in projections:
            assert reopened.projector.verify(name) is None, name
    finally:
        reopened.close()
    restarted = Server(database, 4)
    try:
        api = Http(restarted.url, key)
        assert api.request("DELETE", f"/v1/leases/{acked[-1]}")[0] == 200
    finally:
        restarted.stop()
