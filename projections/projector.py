"""Keeps the read models caught up with the event log, each event applied exactly once.

Works the same on SQLite and PostgreSQL (SQLite's recorder cannot push notifications): a
command catches the projections up to its own position before it answers, so the caller
reads its own writes from any process; servers also poll so others' writes show up.
Several processes may catch up at once: each transaction first claims the tracking record of
every projection it changes and checks that it still holds the position it started from; the
later one waits for the earlier, finds the position moved, rolls back and starts again from the
positions now recorded. A rebuild claims the same record to swap its tables in
(projections/rebuild.py), so catch-ups and rebuilds never interleave.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError, Notification

from titen.projections.projection import Projection
from titen.projections.rebuild import Difference
from titen.projections.rebuild import rebuild as rebuild_from_log
from titen.projections.rebuild import verify as verify_against_log
from titen.projections.store import ViewStore

BATCH = 500
log = logging.getLogger("titen.projector")


class Projector:
    def __init__(self, app: Application[Any], store: ViewStore, projections: Sequence[Projection]):
        self.app = app
        self.store = store
        self.projections = {p.name: p for p in projections}
        self._lock = threading.Lock()
        self._advanced = threading.Condition()
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

    def wait_past(
        self, position: int, timeout: float, until: Callable[[], bool] = lambda: False
    ) -> bool:
        """Block until the projections have applied events beyond `position`, `until()` holds
        (checked whenever `wake` is called) or time is up."""
        with self._advanced:
            return self._advanced.wait_for(lambda: self.position() > position or until(), timeout)

    def wake(self) -> None:
        """Wake every waiter to check its `until` (a subscription's key was revoked)."""
        with self._advanced:
            self._advanced.notify_all()

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

    def reflect(self, position: int) -> None:
        """Catch up to a committed command's position, so its caller reads its own write.

        The command is in the log whatever happens here, and its caller must be told so: a
        failure (the database gone for a moment) is logged, not raised, and the follower or
        the next command applies the event instead.
        """
        try:
            self.catch_up(position)
        except Exception:
            log.exception("catching up to committed position %d failed; applied later", position)

    def rebuild(self, name: str) -> int:
        """Rebuild one projection from the log into scratch tables, swap them in; its position."""
        position = rebuild_from_log(self.app, self.store, self.projections[name])
        self._reload_positions()
        return position

    def verify(self, name: str) -> Difference | None:
        """Where one projection differs from a fresh rebuild at its own position, or None."""
        return verify_against_log(self.app, self.store, self.projections[name])

    def _apply(self, batch: Sequence[Notification]) -> None:
        last = batch[-1].id
        events = [(n.id, self.app.mapper.to_domain_event(n)) for n in batch]
        behind = [name for name in self.projections if self._positions[name] < last]
        with self.store.writing() as writer:
            # One statement claims every projection that is behind, one records them all.
            claimed = writer.claim_all(behind) if behind else {}
            for name in behind:
                start = self._positions[name]
                if claimed[name] != start:
                    raise IntegrityError(f"{name} moved on from {start}")  # applied elsewhere
                projection = self.projections[name]
                for position, event in events:
                    if position > start:
                        projection.apply(writer, event, position)
            if behind:
                writer.advance(behind, last)
        self._advance({name: max(self._positions[name], last) for name in self.projections})

    def _reload_positions(self) -> None:
        self._advance({name: self.store.max_tracking_id(name) or 0 for name in self.projections})

    def _advance(self, positions: dict[str, int]) -> None:
        """Record new positions and wake whoever waits for events beyond the old ones."""
        with self._advanced:
            self._positions.update(positions)
            self._advanced.notify_all()
