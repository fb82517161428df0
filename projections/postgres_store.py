"""PostgreSQL's view store (projections/store.py): its own module, imported only for a store on
PostgreSQL, so that a process on SQLite never loads psycopg."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError
from eventsourcing.postgres import PostgresTrackingRecorder

from titen.projections.store import Row, ViewStore, Writer
from titen.storage import replication
from titen.storage.request_budget import committing
from titen.storage.settle import TRANSACTION_ID, answer_lost, settle_transaction


class PostgresViewStore(PostgresTrackingRecorder, ViewStore):
    skip_locked = " FOR UPDATE SKIP LOCKED"
    notifies = True
    merges_inserts = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tracking_table = self._qualify(self.tracking_table_name)

    def _transaction(self, *, commit: bool) -> Any:
        return self.datastore.transaction(commit=commit)

    def execute_numbered(self, cursor: Any, statement: str, params: Sequence[Any]) -> None:
        """On a RawCursor of the same connection (and pipeline), which takes the statement
        as it is instead of parsing its placeholders."""
        psycopg.RawCursor(cursor.connection).execute(statement, params)

    def answered_by_server(self, failed: Exception) -> bool:
        """A server's error carries its SQLSTATE; a PipelineAborted stands for an earlier
        statement's error in the same pipeline."""
        sqlstate = getattr(failed, "sqlstate", None)
        return sqlstate is not None or isinstance(failed, psycopg.errors.PipelineAborted)

    @contextmanager
    def writing(self) -> Iterator[Writer]:
        """A write transaction that is never answered wrongly when its COMMIT's answer is lost.

        Its first statement reads its transaction id. If the connection is lost once the body
        is done (the COMMIT may have landed unseen), the commit is settled (storage/settle.py):
        it returns as done if it landed, raises NotCommitted (an outage: 503) if it did not, and
        OutcomeUnknown if the store cannot tell. Nothing is ever written twice: the caller is not
        told to run it again. Lost before the COMMIT, it raises as any outage: nothing landed.
        A commit on the primary alone (its standby's wait cancelled: a WARNING) is not done
        either: NotReplicated (storage/replication.py), as for the events' commits.
        """
        lost: Any = None
        xid = ""
        replication.forget()
        try:
            with committing(), self.datastore.get_connection() as conn, conn.transaction():
                cursor = conn.cursor()
                first = cursor.execute(TRANSACTION_ID).fetchone()
                assert first is not None  # one value selected: one row
                xid = first["xid"]
                yield Writer(self, cursor)
                lost = conn  # from here on a lost connection may have committed
        except (OperationalError, InterfaceError) as failed:
            if lost is None or not answer_lost(lost):
                raise
            settle_transaction(self.datastore, lost, xid, failed)  # confirms it if it landed
            return
        if replication.warned():
            replication.confirm_on(self.datastore, replication.WARNED)

    def confirm_replicated(self, why: str) -> None:
        replication.confirm_on(self.datastore, why)

    def writes_blocked(self) -> str | None:
        with self.datastore.get_connection() as conn:
            return replication.blocked(conn)

    def query(self, template: str, params: Sequence[Any] = ()) -> list[Row]:
        """One statement on its own (the pool's connections autocommit): no BEGIN and ROLLBACK
        round trips around it, and no ROLLBACK, which makes psycopg forget the connection's
        prepared statements (DEALLOCATE ALL), so the library's would be prepared again."""
        with self.datastore.get_connection() as conn, conn.cursor() as cursor:
            cursor.execute(self.sql(template), params)
            return [dict(row) for row in cursor.fetchall()]

    def change(self, template: str, params: Sequence[Any] = ()) -> list[Row]:
        """On an autocommit connection, as `query`: one round trip, no BEGIN and COMMIT."""
        with self.datastore.get_connection() as conn, conn.cursor() as cursor:
            cursor.execute(self.sql(template), params)
            return [dict(row) for row in cursor.fetchall()] if cursor.description else []

    def together(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Row]]:
        """In pipeline mode: BEGIN, the statements and COMMIT go to the server at once, one
        round trip in all (no statement may depend on another's result in Python)."""
        with self.datastore.get_connection() as conn:
            with conn.pipeline(), conn.transaction():
                cursors = [conn.cursor() for _ in statements]
                for cursor, (template, params) in zip(cursors, statements, strict=True):
                    cursor.execute(self.sql(template), params)
            return [[dict(row) for row in c.fetchall()] if c.description else [] for c in cursors]

    def claim_sql(self, count: int) -> str:
        """Row locks taken in the order the names are given (an UPDATE's order is the scan's)."""
        return (
            f"SELECT application_name, notification_id FROM {self.tracking_table}"
            " WHERE application_name = ANY(%s)"
            " ORDER BY array_position(%s::text[], application_name) FOR UPDATE"
        )

    def claim_params(self, names: Sequence[str]) -> list[Any]:
        return [list(names), list(names)]

    def columns_sql(self, table: str) -> tuple[str, list[Any]]:
        return (
            "SELECT column_name AS name FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = %s",
            [self.datastore.schema, table],
        )

    def log_sql(self, events_table: str) -> str:
        return (
            "SELECT notification_id, originator_id, originator_version, topic, state"
            f" FROM {self._qualify(events_table)}"
            " WHERE notification_id > %s AND notification_id <= %s ORDER BY notification_id"
        )

    def move_sql(self, count: int) -> str:
        """Locks taken in the order the names are given, as `claim_sql` takes them, so an inline
        write and a catch-up claiming the same records cannot deadlock."""
        return (
            f"UPDATE {self.tracking_table} AS t SET notification_id = %s FROM ("
            f"SELECT application_name FROM {self.tracking_table}"
            " WHERE application_name = ANY(%s)"
            " ORDER BY array_position(%s::text[], application_name) FOR UPDATE) AS locked"
            " WHERE t.application_name = locked.application_name"
        )

    def move_params(self, names: Sequence[str], position: int) -> list[Any]:
        return [position, list(names), list(names)]

    def _qualify(self, table: str) -> str:
        return f'"{self.datastore.schema}"."{table}"'

    def _placeholders(self, statement: str) -> str:
        return statement
