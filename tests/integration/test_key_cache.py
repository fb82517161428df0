"""The in-process key cache: used, and dropped by a revocation made by another process.

Two bootstraps on one database stand for two processes. That the cache is used is shown by
deleting a key's row behind its back (no revocation signal): the cached principal still
authenticates. A revocation through the other bootstrap is seen at once on SQLite (the revision
check) and as soon as the NOTIFY arrives on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import eventually
from titen.service.bootstrap import Services, bootstrap
from titen.service.keys import key_hash


@pytest.fixture
def two(database: str) -> Iterator[tuple[Services, Services]]:
    server, cli = bootstrap(database, pool_size=4), bootstrap(database, pool_size=2)
    server.revocations.start()
    if server.keys.pushes_revocations:
        eventually(lambda: server.keys.listening, "LISTEN")
    yield server, cli
    server.revocations.stop()
    server.close()
    cli.close()


def delete_row(services: Services, key: str) -> None:
    with services.store.writing() as writer:
        writer.execute("DELETE FROM {api_keys} WHERE key_hash = %s", [key_hash(key)])


def test_a_cached_key_is_served_from_memory(two):
    server, cli = two
    key = cli.keys.create("acme", "agent_a", "agent")
    assert server.keys.authenticate(key).name == "agent_a"
    delete_row(cli, key)
    assert server.keys.authenticate(key).name == "agent_a"
    assert cli.keys.authenticate(key) is None  # never cached there


def test_a_revocation_elsewhere_drops_the_cached_key(two):
    server, cli = two
    key = cli.keys.create("acme", "agent_a", "agent")
    other = cli.keys.create("acme", "agent_b", "agent")
    assert server.keys.authenticate(key).name == "agent_a"
    assert server.keys.authenticate(other).name == "agent_b"
    assert cli.keys.revoke("acme", principal="agent_a", key_prefix=None) == 1
    if server.keys.pushes_revocations:
        eventually(lambda: server.keys.authenticate(key) is None, "revocation seen", timeout=1)
    else:
        assert server.keys.authenticate(key) is None
    assert server.keys.authenticate(other).name == "agent_b"


def test_a_watch_opened_after_an_unseen_revocation_is_revoked_at_once(two):
    server, cli = two
    key = cli.keys.create("acme", "agent_a", "agent")
    generation = server.keys.generation
    assert server.keys.authenticate(key) is not None
    cli.keys.revoke("acme", principal="agent_a", key_prefix=None)
    eventually(lambda: server.keys.generation != generation, "revocation seen", timeout=1)
    with server.revocations.watch(key_hash(key), generation) as watch:
        assert watch.revoked.is_set()
    fresh = cli.keys.create("acme", "agent_b", "agent")
    with server.revocations.watch(key_hash(fresh), server.keys.generation) as watch:
        assert not watch.revoked.is_set()
        cli.keys.revoke("acme", principal="agent_b", key_prefix=None)
        assert watch.revoked.wait(1)
