"""Server processes started together on one PostgreSQL database all come up.

Before the schema lock, of two started at once on a new database one died in 6 of 6 tries
(both created the library's types and tables), and about 1 start in 5 failed on an existing one
(both altered the inbox table at once).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tests.support import Http, Server, create_key, postgres_schema

AT_ONCE = 4
ROUNDS = 3


def start_together(database: str) -> list[Server | Exception]:
    """Start AT_ONCE servers at the same moment; each, or why it did not come up."""

    def start(_: int) -> Server | Exception:
        try:
            return Server(database, 2)
        except RuntimeError as exc:
            return exc

    with ThreadPoolExecutor(AT_ONCE) as pool:
        return list(pool.map(start, range(AT_ONCE)))


def stop_all(started: list[Server | Exception]) -> None:
    for server in started:
        if isinstance(server, Server):
            server.stop()


def test_servers_started_at_once_on_a_new_database_all_serve(postgres_database):
    for _ in range(ROUNDS):
        with postgres_schema() as database:
            started = start_together(database)
            try:
                failures = [str(s) for s in started if isinstance(s, Exception)]
                assert failures == []
                key = create_key(database, "acme", "agent_a")
                for server in started:
                    status, _ = Http(server.url).request("GET", "/v1/handoffs", key=key)
                    assert status == 200
            finally:
                stop_all(started)


def test_servers_started_at_once_on_an_existing_database_all_serve(postgres_database):
    create_key(postgres_database, "acme", "agent_a")  # the schema exists from here on
    for _ in range(ROUNDS):
        started = start_together(postgres_database)
        try:
            assert [str(s) for s in started if isinstance(s, Exception)] == []
        finally:
            stop_all(started)
