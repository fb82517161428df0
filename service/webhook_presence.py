"""Whether the store has an enabled webhook: asked on every commit, so that a commit with nothing
to deliver wakes no delivery worker.

The truth is the consumers table: an active consumer of kind "webhook". Every change that can
make one appear or go (create, enable, delete) tells this process at once (`changed`) and, on
PostgreSQL, sends a NOTIFY that every server's listener follows (service/revocations.py), so the
cached answer is used only while that listener is connected, as the key cache is. SQLite cannot
push: an answer read there is used for FRESH_SECONDS, within which another process's change is
seen, since reading it on every commit would cost time inside the write turn every save waits
for. A webhook that delivery turns failing leaves the answer "enabled" until the next change or
read: a spare wake-up, the safe side.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable

from titen.projections.store import ViewStore, Writer
from titen.service.consumers import ACTIVE
from titen.storage.outages import log_failure

log = logging.getLogger("titen.webhooks")

KIND = "webhook"
"""The consumers' kind for webhook subscriptions."""
FRESH_SECONDS = 0.25
"""How long an answer read from the table is used where no change is pushed (SQLite): another
process's create, enable or delete is known here within it; this process's own at once."""


class WebhookPresence:
    def __init__(self, store: ViewStore):
        self.store = store
        self.pushes_changes = store.notifies
        self.on_enabled: list[Callable[[], None]] = []
        """Called when a change leaves an enabled webhook in the store (wakes the follower)."""
        self._known: bool | None = None
        self._generation = 0  # moves whenever the cached answer is dropped
        self._listening = False
        self._fresh_until = 0.0  # monotonic; SQLite's cached answer is used until then
        self._lock = threading.Lock()

    @property
    def channel(self) -> str:
        """The PostgreSQL NOTIFY channel of this store's webhook changes (one per schema)."""
        schema = getattr(self.store.datastore, "schema", "") or "public"
        return "titen_webhooks_" + hashlib.sha256(schema.encode()).hexdigest()[:16]

    def enabled(self) -> bool:
        """Whether some webhook is enabled: from memory while no change can be missed (on
        PostgreSQL), or for FRESH_SECONDS after it was read (on SQLite)."""
        now = time.monotonic()
        with self._lock:
            known, generation = self._known, self._generation
            trusted = self._listening or (not self.pushes_changes and now < self._fresh_until)
        if trusted and known is not None:
            return known
        found = bool(
            self.store.query(
                "SELECT 1 AS found FROM {consumers} WHERE kind = %s AND status = %s LIMIT 1",
                [KIND, ACTIVE],
            )
        )
        with self._lock:
            # Not if a change came meanwhile: the read may predate it.
            if generation == self._generation and (self._listening or not self.pushes_changes):
                self._known = found
                self._fresh_until = now + FRESH_SECONDS
        return found

    def announce(self, writer: Writer) -> None:
        """In the transaction of a create, enable or delete: tell the other processes (on
        PostgreSQL; SQLite's read the table again once their answer is FRESH_SECONDS old)."""
        if self.pushes_changes:
            writer.execute("SELECT pg_notify(%s, '')", [self.channel])

    def changed(self) -> None:
        """A create, enable or delete committed (here, or in another process): drop the cached
        answer, and wake what sleeps while there is nothing to deliver.

        Its caller has committed, so a failing read (the database failing right then) must not
        become the caller's failure (a 503 for a subscription that was made): it is logged, and
        the sleepers are woken anyway, which costs them a look at the table."""
        with self._lock:
            self._known = None
            self._generation += 1
        try:
            enabled = self.enabled()
        except Exception as exc:
            log_failure(log, "reading whether a webhook is enabled after a change", exc)
            enabled = True
        if enabled:
            for wake in self.on_enabled:
                wake()

    def set_listening(self, connected: bool) -> None:
        """Told by the PostgreSQL listener whether it follows changes right now."""
        with self._lock:
            self._listening = connected
            self._known = None
            self._generation += 1
