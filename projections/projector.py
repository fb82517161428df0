"""Keeps the read models equal to the log: written with each command, caught up at startup.

A command's events and the read-model rows derived from them commit in one transaction: the
event recorder calls `write` on its own cursor (storage/inline.py), which first moves every
projection's tracking record, locked until the commit, so a rebuild's swap (which claims the
same records) queues instead of interleaving. `catch_up`, run before serving, applies what the
log holds beyond a projection's position (what an earlier release left unapplied; all, for a new
projection); processes catching up at once check their claimed positions, and the later one
starts again. Every process on a store runs the same release. A read model that raises is named
by `ProjectionFailed` and recorded (projections/failures.py): the command stores nothing, a
catch-up stops; `rebuild`, or a `verify` that finds no difference, clears the record.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import IntegrityError, Notification

from titen.projections.failures import Failures, ProjectionFailed
from titen.projections.projection import Projection
from titen.projections.rebuild import Difference, Progress, unwatched
from titen.projections.rebuild import rebuild as rebuild_from_log
from titen.projections.rebuild import verify as verify_against_log
from titen.projections.store import HeldRowsFailed, ViewStore, Writer
from titen.storage.inline import Recorded

BATCH = 500
RETIRED = {"lease_listing": ("lease_listing",)}
"""Read models of earlier releases that this one no longer keeps, and their tables (the held
leases' listing is lease_index's now): dropped, with their tracking records and failures."""


class Projector:
    def __init__(
        self,
        app: Application[Any],
        store: ViewStore,
        projections: Sequence[Projection],
        failures: Failures,
    ):
        self.app = app
        self.store = store
        self.projections = {p.name: p for p in projections}
        self.failures = failures
        self._names = list(self.projections)
        self._catching_up = threading.Lock()
        self.create_tables()

    def create_tables(self) -> None:
        """Create every projection's tables and its tracking record (at 0 when new).

        The tracking records are claimed first, as a command's inline write does (it moves them
        before it writes any read-model row): `CREATE INDEX IF NOT EXISTS` locks its table
        against writers even when the index exists, and taken before the claim it would deadlock
        with a command holding the records and waiting to write that table. A projection whose
        tables an earlier release shaped differently starts again from the log's beginning.
        """
        with self.store.writing() as writer:
            writer.claim_all(self._names)
            for projection in self.projections.values():
                if projection.outdated(writer.columns):
                    _drop(writer, projection.tables)
                    writer.set_position(projection.name, 0)
                for statement in projection.schema():
                    writer.execute(statement)
            for statement in self.failures.schema():
                writer.execute(statement)
            for name, tables in RETIRED.items():
                _drop(writer, tables)
                writer.forget(name)
                writer.execute("DELETE FROM {projection_failures} WHERE projection = %s", [name])

    def write(self, cursor: Any, recorded: Recorded) -> None:
        """Apply newly recorded events inside the transaction that records them."""
        writer = Writer(self.store, cursor, merging=self.store.merges_inserts)
        writer.move(self._names, recorded[-1][0])  # first: it queues behind a rebuild's swap
        for position, event in recorded:
            for projection in self.projections.values():
                writer.source = (projection.name, position, event)
                _apply(projection, writer, event, position)
        try:
            writer.flush()
        except HeldRowsFailed as failed:
            raise _blamed(failed, writer.source) from failed.__cause__

    def write_failed(self, failed: BaseException) -> None:
        """A command's inline write failed: record the read model that failed, if one did."""
        if isinstance(failed.__cause__, ProjectionFailed):
            self.failures.record(failed.__cause__)

    def positions(self) -> dict[str, int]:
        """Where each projection's tracking record stands in the log."""
        return {name: self.store.max_tracking_id(name) or 0 for name in self._names}

    def catch_up(self, until: int | None = None) -> None:
        """Apply committed events until every projection has passed `until` (or the end)."""
        with self._catching_up:
            positions = self.positions()
            while until is None or min(positions.values()) < until:
                batch = self.app.recorder.select_notifications(
                    start=min(positions.values()), limit=BATCH, inclusive_of_start=False
                )
                if not batch:
                    return
                try:
                    self._apply(batch, positions)
                except IntegrityError:
                    pass  # another process applied them first
                except ProjectionFailed as failed:
                    self.failures.record(failed)
                    raise
                positions = self.positions()

    def rebuild(self, name: str, progress: Progress = unwatched) -> int:
        """Rebuild one projection from the log into scratch tables, swap them in; its position.

        A failure recorded for it is cleared: its rows are now the log's.
        """
        position = rebuild_from_log(self.app, self.store, self.projections[name], progress=progress)
        self.failures.clear(name)
        return position

    def verify(self, name: str, progress: Progress = unwatched) -> Difference | None:
        """Where one projection differs from a fresh rebuild at its own position, or None.

        Equal to the log, a failure recorded for it did not come from its rows: it is cleared.
        """
        difference = verify_against_log(
            self.app, self.store, self.projections[name], progress=progress
        )
        if difference is None:
            self.failures.clear(name)
        return difference

    def _apply(self, batch: Sequence[Notification], positions: dict[str, int]) -> None:
        last = batch[-1].id
        events = [(n.id, self.app.mapper.to_domain_event(n)) for n in batch]
        behind = [name for name in self._names if positions[name] < last]
        with self.store.writing() as writer:
            # One statement claims every projection that is behind, one records them all.
            claimed = writer.claim_all(behind)
            for name in behind:
                start = positions[name]
                if claimed[name] != start:
                    raise IntegrityError(f"{name} moved on from {start}")  # applied elsewhere
                projection = self.projections[name]
                for position, event in events:
                    if position > start:
                        _apply(projection, writer, event, position)
            writer.advance(behind, last)


def _drop(writer: Writer, tables: Sequence[str]) -> None:
    for table in tables:
        writer.execute(f"DROP TABLE IF EXISTS {{{table}}}")


def _apply(projection: Projection, writer: Writer, event: Any, position: int) -> None:
    """Apply one event, naming the read model, the position and the event if it fails."""
    try:
        projection.apply(writer, event, position)
    except HeldRowsFailed as failed:  # rows held earlier, sent by this one's statement
        raise _blamed(failed, (projection.name, position, event)) from failed.__cause__
    except Exception as exc:
        raise ProjectionFailed(projection.name, position, event, exc) from exc


def _blamed(failed: HeldRowsFailed, otherwise: tuple[str, int, Any]) -> ProjectionFailed:
    """The failure of a held row, named for the read model, position and event that wrote it
    (`Writer.source`, as `Projector.write` sets it), else for `otherwise`."""
    name, position, event = failed.source or otherwise
    assert failed.__cause__ is not None
    return ProjectionFailed(name, position, event, failed.__cause__)
