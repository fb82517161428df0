"""The delivery worker pool: threads that claim due consumers and drain them
(service/delivery.py), woken by the doorbell, plus the heartbeat that keeps their claims."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from titen.service.consumers import Consumer, Sink
from titen.service.delivery import Delivery
from titen.service.doorbell import Doorbell
from titen.storage.outages import log_failure

log = logging.getLogger("titen.delivery")

HEARTBEAT_SECONDS = 2.0
IDLE_POLL_SECONDS = 0.25
"""How often an idle worker looks for retries that came due (new events wake it at once)."""
QUIET_POLL_SECONDS = 2.0
"""How often an idle worker asks whether there is anything to deliver at all, while there is not
(`wanted`): a change that makes some appear wakes it at once where it can be known (this
process's own, and on PostgreSQL every process's); another SQLite process's is seen then."""


def per_organization(workers: int) -> int:
    """How many of a process's workers one organization's consumers may hold at once: all but
    one, so that another organization's delivery always finds a worker free, however slow one
    organization's receivers are (docs/webhooks.md, "Deadlines and fairness")."""
    return max(1, workers - 1)


class Workers:
    """Threads that claim due consumers and drain them, plus the heartbeat for their claims."""

    def __init__(
        self,
        delivery: Delivery,
        sink: Sink,
        signal: Doorbell,
        count: int,
        claim: Callable[[], Consumer | None] | None = None,
        wanted: Callable[[], bool] = lambda: True,
    ):
        """`wanted()`: whether anything may be there to claim (webhooks: an enabled one exists).
        While it is not, idle workers make no claim queries (8 workers polling every
        IDLE_POLL_SECONDS would make 32 a second in every idle server process)."""
        self.delivery = delivery
        self.wanted = wanted
        self._wanted_last: bool | None = None
        """What `wanted()` last answered (None: never yet)."""
        self.sink = sink
        self.signal = signal
        cap = per_organization(count)
        self.claim = claim or (lambda: delivery.claim_next(sink.kind, cap))
        self.stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, name=f"{sink.kind}-{i}", daemon=True)
            for i in range(count)
        ]
        self._threads.append(threading.Thread(target=self._beat, name="heartbeat", daemon=True))

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 15) -> None:
        """Finish what is in flight, release the claims, and return."""
        self.stopping.set()
        self.signal.ring_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _work(self) -> None:
        while not self.stopping.is_set():
            try:
                seen = self.signal.version()
                if not self._look():
                    self.signal.wait_past(seen, QUIET_POLL_SECONDS)
                    continue
                consumer = self.claim()
                if consumer is None:
                    self.signal.wait_past(seen, IDLE_POLL_SECONDS)
                    continue
                self.signal.ring()  # another consumer may be due: wake the next worker
                held = True
                try:
                    held = self.delivery.drain(consumer, self.sink, self.stopping)
                finally:
                    if held:
                        self.delivery.release(consumer.name)
            except Exception as exc:
                log_failure(log, f"{self.sink.kind} delivery failed; retrying", exc)
                self.stopping.wait(1)

    def _look(self) -> bool:
        """`wanted()`; when it cannot be read (the database failing over), False and nothing
        logged unless something was known to be wanted: a store with no webhook has nothing
        to deliver, so its workers have nothing to say about an outage (others report it)."""
        try:
            self._wanted_last = self.wanted()
        except Exception as exc:
            if self._wanted_last:
                raise
            log.debug("%s delivery: nothing known to deliver; %s", self.sink.kind, exc)
            return False
        return self._wanted_last

    def _beat(self) -> None:
        while not self.stopping.wait(HEARTBEAT_SECONDS):
            try:
                self.delivery.heartbeat()
            except Exception as exc:
                log_failure(log, "extending delivery claims failed; retrying", exc)
