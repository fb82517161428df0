"""Revocation as a signal: what ends the streams and long-polls opened with a revoked key.

A request authenticates once, when it starts; a stream or a waiting long-poll then lives on.
Each of them `watch`es the hash of the key it was opened with. One thread per server process
follows revocations committed by any process (the CLI included): on PostgreSQL it LISTENs on
the keys' NOTIFY channel, on SQLite it reads the revision row a few times a second. When a
revocation lands it drops the key cache, asks the store which watched keys are still live,
marks the others revoked and wakes every waiter, so each one ends within a second.

On PostgreSQL the same connection also LISTENs for webhook changes (service/webhook_presence.py):
one listening thread per process for both caches, not two.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from titen.service.keys import Keys
from titen.service.webhook_presence import WebhookPresence
from titen.storage.outages import log_failure

log = logging.getLogger("titen.revocations")
SQLITE_POLL_SECONDS = 0.1
RETRY_SECONDS = 0.5


class Watch:
    """One open subscription's key; `revoked` is set once the key is revoked."""

    def __init__(self, key_hash: str):
        self.key_hash = key_hash
        self.revoked = threading.Event()


class Revocations:
    def __init__(self, keys: Keys, presence: WebhookPresence):
        self.keys = keys
        self.presence = presence
        self._watches: set[Watch] = set()
        self._wakers: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen = 0  # SQLite: the revision last acted on

    def on_revoked(self, wake: Callable[[], None]) -> None:
        """Call `wake` after watches were marked revoked (it wakes whatever they wait on)."""
        self._wakers.append(wake)

    @contextmanager
    def watch(self, key_hash: str, generation: int) -> Iterator[Watch]:
        """Watch a key authenticated when the key cache was at `generation`: if a revocation
        has been seen since, the key is checked again now, so none falls in between."""
        watch = Watch(key_hash)
        with self._lock:
            self._watches.add(watch)
        if self.keys.generation != generation and not self.keys.live([key_hash]):
            watch.revoked.set()
        try:
            yield watch
        finally:
            with self._lock:
                self._watches.discard(watch)

    def start(self) -> None:
        if not self.keys.pushes_revocations:
            # Read before the thread starts: one read by the thread itself, whenever it first
            # runs, would take a revocation committed in between as already seen.
            self._seen = self.keys.revision()
        self._thread = threading.Thread(target=self._run, name="revocations", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def revoked(self) -> None:
        """A revocation may have been committed: drop cached keys and end revoked watches."""
        self.keys.forget()
        with self._lock:
            watches = list(self._watches)
        if not watches:
            return
        live = self.keys.live(w.key_hash for w in watches)
        ended = [w for w in watches if w.key_hash not in live]
        for watch in ended:
            watch.revoked.set()
        if ended:
            for wake in self._wakers:
                wake()

    def _run(self) -> None:
        follow = self._listen if self.keys.pushes_revocations else self._poll
        while not self._stop.is_set():
            try:
                follow()
            except Exception as exc:
                log_failure(log, "following key revocations failed; retrying", exc)
                self._stop.wait(RETRY_SECONDS)

    def _poll(self) -> None:
        while not self._stop.wait(SQLITE_POLL_SECONDS):
            revision = self.keys.revision()
            if revision != self._seen:
                self._seen = revision
                self.revoked()

    def _listen(self) -> None:
        from psycopg.sql import SQL, Identifier  # only PostgreSQL stores get here

        datastore = self.keys.store.datastore
        try:
            with datastore.get_connection() as conn:
                conn.execute(SQL("LISTEN {}").format(Identifier(self.keys.channel)))
                conn.execute(SQL("LISTEN {}").format(Identifier(self.presence.channel)))
                self.keys.set_listening(True)
                self.presence.set_listening(True)
                # Anything revoked before LISTEN took effect was missed: check the watches now.
                self.revoked()
                while not self._stop.is_set():
                    for notice in conn.notifies(timeout=RETRY_SECONDS, stop_after=1):
                        if notice.channel == self.presence.channel:
                            self.presence.changed()
                        else:
                            self.revoked()
        finally:
            self.keys.set_listening(False)
            self.presence.set_listening(False)
