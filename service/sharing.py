"""What the worker processes of one server share, made by their parent before it forks them.

A worker inherits what exists when it is forked: memory mapped before the fork (SQLite's WAL
checkpoint progress) is one for all of them, while a file lock belongs to an open file, so each
worker opens the turn's file for itself (`Sharing.turn`). Whatever else the workers of one node
must count together belongs here, made in the parent before the fork.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from titen.storage.group_commit import FileTurn
from titen.storage.sqlite import Progress, shared_progress


@dataclass(frozen=True)
class Sharing:
    turn_path: str | None = None
    """SQLite: the file whose lock orders the workers' saves (storage/group_commit.py)."""
    checkpoints: Progress | None = None
    """SQLite: the WAL checkpoints' progress, counted by every worker (storage/sqlite.py)."""

    def turn(self) -> FileTurn | None:
        """This worker's own opening of the turn (call it in the worker)."""
        return None if self.turn_path is None else FileTurn(self.turn_path)


def for_workers(kind: str, folder: str) -> Sharing:
    """What the workers of a server on a `kind` of store share; files go in `folder`, the
    server's own for this run."""
    if kind != "sqlite":  # PostgreSQL's writers queue on its table lock, and it checkpoints itself
        return Sharing()
    return Sharing(os.path.join(folder, "write-turn"), shared_progress())
