"""Keeps the read models caught up with the event log, each event applied exactly once.

Works the same on SQLite and PostgreSQL (SQLite's recorder cannot push notifications): a
command catches the projections up to its own position before it answers, so the caller
reads its own writes from any process; servers also poll so others' writes show up.
Several processes may catch up at once: a tracking record that does not advance makes the
slower transaction roll back, and it starts again from the positions now recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError, Notification, Tracking

from projections.projection import Projection
from projections.store import ViewStore

BATCH = 500


class Projector:
    def __init__(self, app: Application[Any], store: ViewStore, projections: Sequence[Projection]):
        self.app = app
        self.store = store
        self.projections = {p.name: p for p in projections}
        self._lock = threading.Lock()
        self._positions: dict[str, int] = {}
        self.create_tables()
        self._reload_positions()

    def create_tables(self) -> None:
        with self.store.writing() as writer:
            for projection in self.projections.values():
                for statement in projection.schema():
                    writer.execute(statement)

    def position(self) -> int:
        """How far every projection has applied the log (the slowest one)."""
        return min(self._positions.values(), default=0)

    def catch_up(self, until: int | None = None) -> None:
        """Apply committed events until every projection has passed `until` (or the end)."""
        if until is not None and self.position() >= until:
            return
        with self._lock:
            while until is None or self.position() < until:
                batch = self.app.recorder.select_notifications(
                    start=self.position(), limit=BATCH, inclusive_of_start=False
                )
                if not batch:
                    return
                try:
                    self._apply(batch)
                except IntegrityError:
                    self._reload_positions()  # another process applied them first

    def rebuild(self, name: str) -> None:
        """Drop one projection's tables and apply the whole log to them again."""
        projection = self.projections[name]
        with self._lock, self.store.writing() as writer:
            for table in projection.tables:
                writer.execute(f"DROP TABLE IF EXISTS {{{table}}}")
            for statement in projection.schema():
                writer.execute(statement)
            writer.forget(name)
            self._positions[name] = 0
        self.catch_up()

    def _apply(self, batch: Sequence[Notification]) -> None:
        last = batch[-1].id
        events = [(n.id, self.app.mapper.to_domain_event(n)) for n in batch]
        with self.store.writing() as writer:
            for name, projection in self.projections.items():
                start = self._positions[name]
                if start >= last:
                    continue
                for position, event in events:
                    if position > start:
                        projection.apply(writer, event, position)
                writer.track(Tracking(name, last))
        for name in self.projections:
            self._positions[name] = max(self._positions[name], last)

    def _reload_positions(self) -> None:
        for name in self.projections:
            self._positions[name] = self.store.max_tracking_id(name) or 0
