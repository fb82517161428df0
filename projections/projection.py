"""What every read model provides to the projector."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from titen.projections.store import Writer


class Projection(ABC):
    name: str
    """Its tracking name: where it is in the log."""
    tables: tuple[str, ...]
    """The tables it owns (dropped on rebuild)."""

    @abstractmethod
    def schema(self) -> list[str]:
        """CREATE statements for its tables and indexes, idempotent."""

    def outdated(self, columns: Callable[[str], set[str]]) -> bool:
        """Whether its tables are in an earlier release's shape (`columns` names a table's
        columns, none for a missing table): the projector then drops them and applies the log
        to it again from the start."""
        return False

    @abstractmethod
    def apply(self, writer: Writer, event: Any, position: int) -> None:
        """Change the rows for one domain event, inside the projector's transaction."""
