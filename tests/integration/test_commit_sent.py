"""A connection lost once the COMMIT has gone out is a lost answer, settled, never NotCommitted.

On PostgreSQL the read models' rows and the COMMIT go in one pipeline (storage/postgres.py).
`Cursor.execute("COMMIT")` in pipeline mode hands the statement to libpq and flushes it before
it returns; the connection can fail inside that call after the COMMIT's bytes have left (libpq
flushes a pipeline's buffer as it fills, a DeadlineConnection's timeout finishes the connection
and so flushes what libpq still holds). The commit may then have landed: answering
NotCommitted ("nothing changed") denies a change that was made.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.support import eventually
from titen.service.bootstrap import bootstrap


def test_a_connection_lost_inside_the_commits_send_is_settled(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch
):
    services = bootstrap(postgres_database, pool_size=2)
    app = services.app
    key = app.resource_keys.of("acme", "deploy", "r")
    sent = psycopg.Cursor.execute
    lost = []

    def execute(self: psycopg.Cursor, query: object, *args: object, **kwargs: object) -> object:
        """The COMMIT is sent and lands; then the connection fails before `execute` returns."""
        result = sent(self, query, *args, **kwargs)
        if query == "COMMIT" and not lost:
            lost.append(self.connection)
            eventually(
                lambda: app.recorder.select_events(key),
                "the commit landed, seen on another pooled connection",
                timeout=5,
            )
            self.connection.pgconn.finish()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return result

    try:
        monkeypatch.setattr(psycopg.Cursor, "execute", execute)
        committed = app.acquire_lease(
            organization="acme",
            holder="agent_alice",
            resource_type="deploy",
            resource_id="r",
            purpose="p",
            ttl_seconds=60,
        )
        assert lost, "the fault was not injected"
        assert committed.position == app.recorder.max_notification_id()
    finally:
        services.close()
