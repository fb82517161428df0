"""The slots of open event streams and waiting long-polls, each holding a thread: a limit per
server process, and quotas per organization and per principal.

Past a quota: 429 `TOO_MANY_SUBSCRIBERS`; past the limit: 503; quotas are checked first, so a
noisy organization is told it is the one over. A slot is freed when its client closes the
connection (`client_gone`). Each worker process has its own limit and quotas.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import falcon

from titen.api.rest.connections import WATCH_CLIENT
from titen.api.rest.contract import TOO_MANY_SUBSCRIBERS
from titen.api.rest.errors import error
from titen.api.rest.metrics import SUBSCRIBERS
from titen.service.keys import Principal
from titen.service.read_models import RecentEvents
from titen.service.revocations import Revocations


@dataclass(frozen=True)
class Limits:
    total: int
    per_org: int
    per_principal: int


class Subscribers:
    """One process's streams and waiting long-polls, their heartbeat, and what ends them."""

    def __init__(
        self,
        limits: Limits,
        heartbeat_seconds: float,
        revocations: Revocations,
        recent: RecentEvents,
    ):
        self.limits = limits
        self.heartbeat_seconds = heartbeat_seconds
        self.revocations = revocations
        self.recent = recent
        self._lock = threading.Lock()
        self._open = 0
        self._by_org: Counter[str] = Counter()
        self._by_principal: Counter[tuple[str, str]] = Counter()

    def admit(self, principal: Principal) -> None:
        org, name = principal.organization, principal.name
        with self._lock:
            self._check(org, name)
            self._open += 1
            self._by_org[org] += 1
            self._by_principal[org, name] += 1
        SUBSCRIBERS.inc()
        self.recent.subscribe(org)

    def leave(self, principal: Principal) -> None:
        org, name = principal.organization, principal.name
        self.recent.unsubscribe(org)
        SUBSCRIBERS.dec()
        with self._lock:
            self._open -= 1
            self._by_org[org] -= 1
            self._by_principal[org, name] -= 1
            if not self._by_org[org]:
                del self._by_org[org]
            if not self._by_principal[org, name]:
                del self._by_principal[org, name]

    def client_gone(self, req: falcon.Request) -> Callable[[], bool]:
        """Whether the client has closed its connection (waiters are woken when it does)."""
        watch = req.env.get(WATCH_CLIENT)
        if watch is None:
            return lambda: False
        return watch(self.recent.wake)

    def _check(self, org: str, name: str) -> None:
        limits = self.limits
        advice = "close one, or poll GET /v1/events without wait."
        if self._by_principal[org, name] >= limits.per_principal:
            raise _over(
                f"This principal already holds {limits.per_principal} open subscriptions on this "
                f"server, its quota; {advice}"
            )
        if self._by_org[org] >= limits.per_org:
            raise _over(
                f"This organization already holds {limits.per_org} open subscriptions on this "
                f"server, its quota; {advice}"
            )
        if self._open >= limits.total:
            raise error(
                503,
                f"Too many open subscriptions on this server (limit {limits.total}); "
                "retry later or poll GET /v1/events without wait.",
            )


def _over(message: str) -> falcon.HTTPError:
    return error(429, message, TOO_MANY_SUBSCRIBERS)
