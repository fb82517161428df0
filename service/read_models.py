"""The read models' types the edges handle: an event as the log serves it (`Published`), the
in-memory fan-out that streams and long-polls wait on (`RecentEvents`), and the failure of a
read model that stops a store from opening until it is repaired (`ProjectionFailed`).
Re-exported from projections/, which the edges do not import."""

from __future__ import annotations

from titen.projections.event_log import Published
from titen.projections.failures import ProjectionFailed
from titen.projections.recent_events import RecentEvents

__all__ = ["ProjectionFailed", "Published", "RecentEvents"]
