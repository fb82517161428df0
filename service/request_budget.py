"""A request's one deadline over its waits on the database, as the edges start and read it
(re-exported from storage/request_budget.py, which the edges do not import)."""

from __future__ import annotations

from titen.storage.request_budget import end, left, request, start

__all__ = ["end", "left", "request", "start"]
