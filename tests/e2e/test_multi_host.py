"""libpq's multi-host URL reaches every connection a real node and the CLI open: the first host
dead, the second serving, the query's libpq parameters passed through."""

from __future__ import annotations

import psycopg

from tests.support import POSTGRES_URL, Http, Server, titen

LEASE = {"purpose": "p", "ttl_seconds": 60, "resource_type": "deploy", "resource_id": "r"}


def multi_host(url: str, dead_port: int = 1) -> str:
    """`url` (one host, with ?schema=) with a host where nothing listens put before its own,
    and libpq asked for the primary."""
    scheme, _, rest = url.partition("://")
    user, _, where = rest.partition("@")
    return f"{scheme}://{user}@127.0.0.1:{dead_port},{where}&target_session_attrs=read-write"


def test_a_node_and_the_cli_serve_through_the_second_host_of_a_multi_host_url(
    postgres_database,
):
    url = multi_host(postgres_database)
    alice = ["keys", "create", "--org", "acme", "--principal", "agent_alice"]
    key = titen(*alice, database=url).stdout.strip()  # the command, through the URL's hosts
    server = Server(url, 4)
    try:
        http = Http(server.url, key)
        assert http.request("POST", "/v1/leases", LEASE)[0] == 201
        assert http.request("GET", "/readyz")[0] == 200
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                [f"titen {server.process.pid}"],
            ).fetchone()
        assert rows is not None and rows[0] >= 2  # the LISTEN connections and the pool's
    finally:
        server.stop()
    assert "127.0.0.1:1,127.0.0.1:" in server.log
