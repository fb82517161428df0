"""A read model whose row the client cannot send is the one named and recorded, with the event
that made the row, on both backends. On PostgreSQL a command's inline write holds plain INSERTs
and sends them later (projections/store.py, `Writer(merging=True)`): by another read model's
statement, or at the write's end. A failure of that send is still the holder's."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import acquire
from titen.service.bootstrap import Services

BROKEN = "lease_index"
"""The first read model a command's events are applied to: its rows are held longest."""


BROKEN_ROWS = {
    "a value no driver can send": ("(%s)", [object()]),
    "too few values": ("(%s, %s)", [1]),
    "too many values": ("(%s)", [1, 2]),
}
"""Rows no driver sends: psycopg cannot adapt the value, or the values do not match the
placeholders (a merging writer must not hold these: joined, they could be read as other rows'
values); SQLite refuses each of them too."""


def break_rows_of(services: Services, name: str, broken: str) -> None:
    """From now on the read model writes, for every event, one of the BROKEN_ROWS."""
    placeholders, values = BROKEN_ROWS[broken]

    def unsendable(writer: Any, event: Any, position: int) -> None:
        writer.execute(f"INSERT INTO {{{name}}} VALUES {placeholders}", values)

    services.projector.projections[name].apply = unsendable  # type: ignore[method-assign]


def send_first_in(services: Services, name: str) -> None:
    """Make the read model run a statement of its own (not an INSERT that can be held) before
    its rows: it sends whatever the read models before it hold."""
    projection = services.projector.projections[name]
    apply = projection.apply

    def sending(writer: Any, event: Any, position: int) -> None:
        writer.execute("SELECT 1")
        apply(writer, event, position)

    projection.apply = sending  # type: ignore[method-assign]


@pytest.mark.parametrize("broken", BROKEN_ROWS)
@pytest.mark.parametrize("sent_by", ["the write's end", "a later read model"])
def test_a_row_that_cannot_be_sent_is_blamed_on_its_read_model_and_event(
    services: Services, sent_by: str, broken: str
):
    acquire(services, 0)
    last = services.app.recorder.max_notification_id()
    assert last is not None
    break_rows_of(services, BROKEN, broken)
    if sent_by == "a later read model":
        send_first_in(services, list(services.projector.projections)[-1])
    with pytest.raises(Exception, match=BROKEN):
        acquire(services, 1)
    assert services.app.recorder.max_notification_id() == last  # nothing stored
    [failure] = services.projector.failures.current()
    assert failure.projection == BROKEN
    assert failure.position == last + 1  # the acquire's first event, the first bad row's
    assert failure.event_type == "lease.registered"
