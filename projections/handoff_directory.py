"""Every handoff that was ever created, by handoff_id: which organization it belongs to.

A handoff id is the id of its aggregate, and any id a caller sends could be the id of another
organization's aggregate (of an earlier store, a lease's: those ids are computable, see
domain/lease.py). Looking the id up here first, by organization, means a lookup for another
organization's id reads nothing of that organization's events. One row per Created event, never
deleted: a pointer only; the handoff itself is always read from the event store.
"""

from __future__ import annotations

from typing import Any

from titen.domain.handoff import Handoff, public_id
from titen.projections.projection import Projection
from titen.projections.store import ViewStore, Writer


class HandoffDirectory(Projection):
    name = "handoff_directory"
    tables = ("handoff_directory",)

    def __init__(self, store: ViewStore):
        self.store = store

    def schema(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS {handoff_directory} ("
            " organization TEXT NOT NULL, handoff_id TEXT NOT NULL,"
            " PRIMARY KEY (organization, handoff_id))"
        ]

    def apply(self, writer: Writer, event: Any, position: int) -> None:
        if isinstance(event, Handoff.Created):
            writer.execute(
                "INSERT INTO {handoff_directory} VALUES (%s, %s)",
                [event.organization, public_id(event.originator_id)],
            )

    def belongs_to(self, handoff_id: str, organization: str) -> bool:
        """Whether `handoff_id` is a handoff of `organization`: one probe of the key, which
        starts with the organization, so no other organization's row is looked at."""
        return bool(
            self.store.query(
                "SELECT 1 FROM {handoff_directory} WHERE organization = %s AND handoff_id = %s",
                [organization, handoff_id],
            )
        )

    def rows(self) -> list[dict[str, Any]]:
        """Every row in a stable order, for comparing with a rebuild."""
        return self.store.query(
            "SELECT * FROM {handoff_directory} ORDER BY organization, handoff_id"
        )
