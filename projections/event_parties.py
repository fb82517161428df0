"""Who is party to each published event: the rows an agent's reading of the log goes through.

An agent reads only the events it is party to (the leases it holds or held, the handoffs it sent
or received), so its read of the log starts here, keyed by (organization, principal, position),
and joins the log's rows: it costs in proportion to its own events, not its organization's. A
read model of its own, so that a store of an earlier release gets it by the startup catch-up.
"""

from __future__ import annotations

from typing import Any

from titen.domain.handoff import Handoff
from titen.domain.lease import Lease
from titen.projections.projection import Projection
from titen.projections.store import ViewStore, Writer


class EventParties(Projection):
    name = "event_parties"
    tables = ("event_parties",)

    def __init__(self, store: ViewStore):
        self.store = store

    def schema(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS {event_parties} ("
            " organization TEXT NOT NULL, principal TEXT NOT NULL, position BIGINT NOT NULL,"
            " PRIMARY KEY (organization, principal, position)){CLUSTERED}"
        ]

    def apply(self, writer: Writer, event: Any, position: int) -> None:
        for principal in parties(event):
            writer.execute(
                "INSERT INTO {event_parties} VALUES (%s, %s, %s)",
                [event.organization, principal, position],
            )

    def rows(self) -> list[dict[str, Any]]:
        """Every row in a stable order, for comparing with a rebuild."""
        return self.store.query(
            "SELECT * FROM {event_parties} ORDER BY organization, principal, position"
        )


def parties(event: Any) -> tuple[str, ...]:
    """The principals party to an event the log publishes (none for one it does not)."""
    if isinstance(event, Lease.Acquired):
        return (event.holder,)
    if isinstance(event, Handoff.Created | Handoff.Accepted | Handoff.Rejected):
        return tuple(dict.fromkeys((event.from_principal, event.to_principal)))
    return ()
