"""Rebuilding a projection beside the live one, and checking the live one against the log.

A rebuild never writes the live tables until it is complete: the projection is applied to
scratch copies (`<table>__rebuild`) in short transactions, so commands carry on meanwhile. Then
one transaction claims the live projection's tracking record, which every command moves in its
own transaction, so no command commits until it ends and the live position is the log's end;
the copy catches up to there and replaces the live rows (`Scratch.swap`). Readers see the old
rows or the new, never a half-built table. Verification builds the copy up to the live position
and compares the two in a transaction that holds that position. The copy's own tracking record,
claimed by each of its transactions, keeps two rebuilds of one projection from interleaving:
the later resets it and the earlier stops with `RebuildInterrupted`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eventsourcing.application import Application

from titen.projections.projection import Projection
from titen.projections.store import Row, ViewStore, Writer

SUFFIX = "__rebuild"
BATCH = 500
INDEX_NAME = re.compile(r"(CREATE\s+(?:UNIQUE\s+)?INDEX\s+IF\s+NOT\s+EXISTS\s+)(\w+)", re.I)


class RebuildInterrupted(RuntimeError):
    """Another rebuild of the same projection started; this one stopped without a change."""


@dataclass(frozen=True)
class Difference:
    """The first row on which a live table and its rebuild from the log disagree."""

    table: str
    position: int
    live: Row | None
    rebuilt: Row | None

    def __str__(self) -> str:
        where = f"{self.table} at log position {self.position}"
        if self.rebuilt is None:
            return f"{where}: live has a row the log does not give: {_show(self.live)}"
        if self.live is None:
            return f"{where}: the log gives a row live lacks: {_show(self.rebuilt)}"
        return f"{where}: live has {_show(self.live)} where the log gives {_show(self.rebuilt)}"


Progress = Callable[[int], None]
"""Told the copy's log position after each batch (a command line draws it as a bar)."""


def unwatched(position: int) -> None:
    """Nobody follows this rebuild's progress."""


class Scratch:
    """A projection's tables built from the log under other names, beside the live ones."""

    def __init__(
        self,
        app: Application[Any],
        store: ViewStore,
        projection: Projection,
        batch: int = BATCH,
        progress: Progress = unwatched,
    ):
        self.app = app
        self.store = store
        self.projection = projection
        self.batch = batch
        self.progress = progress
        self.name = projection.name + SUFFIX
        self.tables = {table: table + SUFFIX for table in projection.tables}
        self.position = 0

    def create(self) -> None:
        """Start empty (dropping what an earlier, interrupted run left behind)."""
        with self.store.writing() as writer:
            writer.claim(self.name)
            self._drop(writer)
            scratch = writer.redirected(self.tables)
            for statement in self.projection.schema():
                # Index names are unique per schema: give the copy's indexes names of their own.
                scratch.execute(INDEX_NAME.sub(lambda m: m[1] + m[2] + SUFFIX, statement))
            writer.set_position(self.name, 0)
        self.position = 0

    def fill(self, until: int | None = None) -> None:
        """Apply the log after the copy's position, up to `until` or its end, batch by batch."""
        while until is None or self.position < until:
            batch = self.app.recorder.select_notifications(
                start=self.position, limit=self.batch, stop=until, inclusive_of_start=False
            )
            if not batch:
                return
            with self.store.writing() as writer:
                self._claim(writer)
                scratch = writer.redirected(self.tables)
                for notification in batch:
                    event = self.app.mapper.to_domain_event(notification)
                    self.projection.apply(scratch, event, notification.id)
                self.position = batch[-1].id
                writer.set_position(self.name, self.position)
            self.progress(self.position)

    def swap(self) -> int:
        """Replace the live rows with the copy's, brought up to the log's end; the position.

        `DELETE` then `INSERT … SELECT` keeps the live table's indexes, and readers see the old
        rows until the commit (PostgreSQL's snapshots, SQLite's WAL). The log's tail is read on
        the claiming transaction's connection: asking the SQLite pool for a second while another
        thread waits for the writer would deadlock until the pool's timeout. The copy may be
        ahead of live (events an earlier release left unapplied): nobody applies those to live
        while its record is claimed.
        """
        live = self.projection.name
        self.fill()
        with self.store.writing() as writer:
            position = writer.claim(live)  # commands wait from here until the commit
            self._claim(writer)
            self._fill_within(writer, position)
            for table, scratch in self.tables.items():
                writer.execute(f"DELETE FROM {{{table}}}")
                writer.execute(f"INSERT INTO {{{table}}} SELECT * FROM {{{scratch}}}")
            self._drop(writer)
            writer.forget(self.name)
            writer.set_position(live, self.position)
            return self.position

    def compare(self) -> Difference | None:
        """The first difference from the live tables, both at the live position; then discard."""
        live = self.projection.name
        with self.store.writing() as writer:
            position = writer.claim(live)
            if position < self.position:
                raise RuntimeError(f"the rebuild of {live} went past its position {position}")
            self._claim(writer)
            self._fill_within(writer, position)
            found = self._first_difference(writer)
            self._drop(writer)
            writer.forget(self.name)
            return found

    def _fill_within(self, writer: Writer, until: int) -> None:
        """Apply the events after the copy's position up to `until` inside the claiming
        transaction, read on its own connection: no command can commit meanwhile."""
        if until <= self.position:
            return
        scratch = writer.redirected(self.tables)
        recorder = self.app.recorder
        for position, stored in writer.log(recorder, self.position, until):
            self.projection.apply(scratch, self.app.mapper.to_domain_event(stored), position)
        self.position = until
        writer.set_position(self.name, until)

    def discard(self) -> None:
        with self.store.writing() as writer:
            self._drop(writer)
            writer.forget(self.name)

    def _claim(self, writer: Writer) -> None:
        """Hold the copy's record; if another rebuild reset it, this one is over."""
        if writer.claim(self.name) != self.position:
            raise RebuildInterrupted(f"another rebuild of {self.projection.name} started")

    def _first_difference(self, writer: Writer) -> Difference | None:
        for table, scratch in self.tables.items():
            found = _first_difference(
                table,
                self.position,
                writer.fetchall(f"SELECT * FROM {{{table}}}"),
                writer.fetchall(f"SELECT * FROM {{{scratch}}}"),
            )
            if found is not None:
                return found
        return None

    def _drop(self, writer: Writer) -> None:
        for scratch in self.tables.values():
            writer.execute(f"DROP TABLE IF EXISTS {{{scratch}}}")


def rebuild(
    app: Application[Any],
    store: ViewStore,
    projection: Projection,
    batch: int = BATCH,
    progress: Progress = unwatched,
) -> int:
    """Rebuild one projection from the log and swap it in; returns its new position."""
    scratch = Scratch(app, store, projection, batch, progress)
    scratch.create()
    try:
        scratch.fill()
        return scratch.swap()
    except RebuildInterrupted:
        raise  # the copy now belongs to the rebuild that interrupted this one
    except BaseException:
        scratch.discard()
        raise


def verify(
    app: Application[Any],
    store: ViewStore,
    projection: Projection,
    batch: int = BATCH,
    progress: Progress = unwatched,
) -> Difference | None:
    """Rebuild into scratch tables up to the live position and compare; the first difference."""
    scratch = Scratch(app, store, projection, batch, progress)
    scratch.create()
    try:
        scratch.fill(until=store.max_tracking_id(projection.name) or 0)
        return scratch.compare()
    except RebuildInterrupted:
        raise
    except BaseException:
        scratch.discard()
        raise


def _first_difference(
    table: str, position: int, live: list[Row], rebuilt: list[Row]
) -> Difference | None:
    """Compare as multisets; report the smallest differing row, paired by its first column."""
    live_only = Counter(map(_canonical, live)) - Counter(map(_canonical, rebuilt))
    rebuilt_only = Counter(map(_canonical, rebuilt)) - Counter(map(_canonical, live))
    if not live_only and not rebuilt_only:
        return None
    first = min([*live_only, *rebuilt_only])
    row = json.loads(first)
    key = next(iter(row.items()), None)
    in_live = first in live_only
    other = [json.loads(r) for r in (rebuilt_only if in_live else live_only)]
    partner = next((r for r in other if next(iter(r.items()), None) == key), None)
    if in_live:
        return Difference(table, position, live=row, rebuilt=partner)
    return Difference(table, position, live=partner, rebuilt=row)


def _canonical(row: Row) -> str:
    """A row as text that compares equal exactly when the rows do (column order kept)."""
    return json.dumps(row, default=str)


def _show(row: Row | None) -> str:
    return json.dumps(row, default=str)
