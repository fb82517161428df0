"""Read models written in the command's own transaction: the hook both event recorders call.

A command's events and every read-model row derived from them commit together. The recorder
inserts the events, learns their log positions, and then, still inside that transaction (and,
on PostgreSQL, under the table lock that keeps commit order equal to log order), hands the
positions and the domain events exactly as the command made them to `inline`: no read-back, no
second decode, no catch-up afterwards. If writing the rows fails, the transaction rolls back and
the command stores no event.

Storage knows nothing of the read models: `inline` is set once, at startup, by the composition
root (service/bootstrap.py) to the projector's writer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eventsourcing.persistence import ProgrammingError

from titen.storage.outages import is_outage

DOMAIN_EVENTS = "new_domain_events"
"""The keyword under which the application passes a save's domain events to the recorder."""
KEPT = "kept_rows"
"""The keyword under which a save passes rows to store with its events (stored answers)."""

Recorded = Sequence[tuple[int, Any]]
"""(log position, domain event) pairs, in log order."""
InlineWrite = Callable[[Any, Recorded], None]
"""Writes the read-model rows of newly recorded events on the recorder's open cursor."""


Keep = Callable[[Any, Sequence[Any]], None]
"""Writes a save's kept rows on the recorder's open cursor; raises RowExists on a duplicate."""


class RowExists(Exception):
    """A row a command stores with its events was there already: the command stored nothing.

    Not the store's IntegrityError either: running the command again would not help, its
    caller reads the row that is there instead (titen.service.answers).
    """


class ReadModelWriteFailed(RuntimeError):
    """Writing the read models of a command's events failed; the command stored nothing.

    Deliberately not the store's IntegrityError, which means "another command saved this
    aggregate first" and makes the command run again: a failing read model is not a lost race.
    """


class InlineRecording:
    """What a recorder mixes in to call the inline hook after inserting events."""

    inline: InlineWrite | None = None
    keep: Keep | None = None

    def write_inline(
        self, cursor: Any, positions: Sequence[int] | None, kwargs: dict[str, Any]
    ) -> None:
        """Store the save's kept rows, then pass the inserted events, with their positions, to
        the read models (each if its hook is set)."""
        kept = kwargs.get(KEPT)
        if kept and self.keep is not None:
            self.keep(cursor, kept)
        events = kwargs.get(DOMAIN_EVENTS)
        if self.inline is None or not events:
            return
        if positions is None or len(positions) != len(events):
            raise ProgrammingError("inline read models need a position for every event")
        try:
            self.inline(cursor, list(zip(positions, events, strict=True)))
        except Exception as exc:
            if is_outage(exc):
                raise  # the connection failed, not the read model: an outage, not a failure
            raise ReadModelWriteFailed(f"writing the read models failed: {exc}") from exc
