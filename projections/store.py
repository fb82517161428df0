"""The tables beside the event store, written in the same transaction as their tracking record.

One class per backend, each extending the library's tracking recorder for that backend, so a
projection's rows and its position in the log commit together and each event applies once.
SQL is written once for both: `{table}` names are qualified here and `%s` placeholders adapted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import Tracking, TrackingRecorder
from eventsourcing.postgres import PostgresTrackingRecorder
from eventsourcing.sqlite import SQLiteFactory, SQLiteTrackingRecorder

Row = dict[str, Any]


class Writer:
    """One open write transaction on the store."""

    def __init__(self, store: ViewStore, cursor: Any):
        self._store = store
        self._cursor = cursor

    def execute(self, template: str, params: Sequence[Any] = ()) -> None:
        self._cursor.execute(self._store.sql(template), params)

    def fetchall(self, template: str, params: Sequence[Any] = ()) -> list[Row]:
        self.execute(template, params)
        return [dict(row) for row in self._cursor.fetchall()]

    def track(self, tracking: Tracking) -> None:
        """Record a projection's new position; raises IntegrityError if it does not advance."""
        self._store._insert_tracking(self._cursor, tracking)

    def forget(self, name: str) -> None:
        """Reset a projection's position to the start of the log."""
        self.execute(
            f"DELETE FROM {self._store.tracking_table} WHERE application_name = %s", [name]
        )


class ViewStore(TrackingRecorder, ABC):
    tracking_table: str

    @abstractmethod
    def _transaction(self, *, commit: bool) -> Any: ...

    @abstractmethod
    def _qualify(self, table: str) -> str: ...

    @abstractmethod
    def _placeholders(self, statement: str) -> str: ...

    @contextmanager
    def writing(self) -> Iterator[Writer]:
        with self._transaction(commit=True) as cursor:
            yield Writer(self, cursor)

    def query(self, template: str, params: Sequence[Any] = ()) -> list[Row]:
        with self._transaction(commit=False) as cursor:
            cursor.execute(self.sql(template), params)
            return [dict(row) for row in cursor.fetchall()]

    def sql(self, template: str) -> str:
        return _compile(self, template)


@lru_cache(maxsize=512)
def _compile(store: ViewStore, template: str) -> str:
    return store._placeholders(template.format_map(_Qualified(store)))


class _Qualified(dict[str, str]):
    def __init__(self, store: ViewStore):
        super().__init__()
        self._store = store

    def __missing__(self, table: str) -> str:
        return self._store._qualify(table)


class SQLiteViewStore(SQLiteTrackingRecorder, ViewStore):
    tracking_table = "tracking"

    def _transaction(self, *, commit: bool) -> Any:
        return self.datastore.transaction(commit=commit)

    def _qualify(self, table: str) -> str:
        return table

    def _placeholders(self, statement: str) -> str:
        return statement.replace("%s", "?")


class PostgresViewStore(PostgresTrackingRecorder, ViewStore):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tracking_table = self._qualify(self.tracking_table_name)

    def _transaction(self, *, commit: bool) -> Any:
        return self.datastore.transaction(commit=commit)

    def _qualify(self, table: str) -> str:
        return f'"{self.datastore.schema}"."{table}"'

    def _placeholders(self, statement: str) -> str:
        return statement


def open_store(app: Application[Any]) -> ViewStore:
    """The view store on the same database (and connection pool) as the app's event store."""
    if isinstance(app.factory, SQLiteFactory):
        return app.factory.tracking_recorder(SQLiteViewStore)
    return app.factory.tracking_recorder(PostgresViewStore)
