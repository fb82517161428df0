"""A connection lost while the read models are written is an outage, never a read model's failure.

The event log's row for a resolved handoff looks up the handoff's creation in the middle of the
pipeline that writes the read models (storage/postgres.py). When the connection dies there,
psycopg stops reading and the cursor still holds the result of the statement before, so the
lookup fails as a statement that "didn't produce records" (seen in a fault soak). Taken at its
word that is the event log's failure, recorded until an operator rebuilds it; it is an outage
before the COMMIT was sent: nothing changed, and the command may run again.
"""

from __future__ import annotations

import psycopg
import pytest

from titen.service.bootstrap import bootstrap
from titen.storage.outages import NotCommitted
from titen.storage.postgres import InlinePostgresRecorder


def test_a_lookup_that_fails_on_a_lost_connection_is_not_committed_and_records_no_failure(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch
):
    services = bootstrap(postgres_database, pool_size=3)
    app = services.app
    fetched = psycopg.Cursor.fetchall
    armed, lost = [False], []

    def fetchall(self: psycopg.Cursor) -> list:
        """Inside the read models' pipeline: the connection dies, and the cursor answers with
        the statement before's result, as psycopg does then."""
        if armed[0] and self.connection._pipeline is not None and not lost:
            lost.append(self.connection)
            self.connection.pgconn.finish()
            raise psycopg.ProgrammingError(
                "the last operation didn't produce records (command status: DELETE 1)"
            )
        return fetched(self)

    try:
        created = app.create_handoff(
            organization="acme",
            from_principal="agent_alice",
            to_principal="agent_bob",
            subject_id="s",
            context_id=None,
            checkpoint_id=None,
            message=None,
            is_principal=lambda name: True,
        )
        handoff = created.value.id
        monkeypatch.setattr(psycopg.Cursor, "fetchall", fetchall)
        armed[0] = True
        with pytest.raises(NotCommitted):
            app.resolve_handoff(organization="acme", key=handoff, by="agent_bob", accept=True)
        assert lost, "the fault was not injected"
        armed[0] = False
        assert services.projector.failures.current() == []
        resolved = app.resolve_handoff(
            organization="acme", key=handoff, by="agent_bob", accept=True
        )
        assert resolved.position == app.recorder.max_notification_id()
    finally:
        services.close()


def test_a_connection_lost_before_the_commit_is_sent_is_not_committed_without_settling(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch
):
    """Lost in the first round trip (the insert), no COMMIT has left: nothing landed, and that
    is known without asking the store, which in an outage cannot answer (else OUTCOME_UNKNOWN
    where UNAVAILABLE is the truth)."""
    services = bootstrap(postgres_database, pool_size=3)
    fetched = psycopg.RawCursor.fetchall
    lost: list[psycopg.Connection] = []
    settled: list[Exception] = []

    def fetchall(self: psycopg.RawCursor) -> list:
        """The insert's answer, read after the first pipeline: the connection died before it."""
        if not lost:
            lost.append(self.connection)
            self.connection.pgconn.finish()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return fetched(self)

    def settle(
        recorder: InlinePostgresRecorder, connection: object, events: object, failed: Exception
    ):
        settled.append(failed)
        raise AssertionError("settled a commit that was never sent")

    monkeypatch.setattr(psycopg.RawCursor, "fetchall", fetchall)
    monkeypatch.setattr(InlinePostgresRecorder, "_settle", settle)
    try:
        with pytest.raises(NotCommitted):
            services.app.acquire_lease(
                organization="acme",
                resource_type="deploy",
                resource_id="r",
                holder="agent_alice",
                purpose="p",
                ttl_seconds=60,
            )
        assert lost, "the fault was not injected"
        assert settled == []
    finally:
        services.close()
