"""The slots of open event streams and waiting long-polls, each holding a thread: a limit per
worker process (503), and quotas per organization and per principal (429 TOO_MANY_SUBSCRIBERS),
checked first so that a noisy organization is told it is the one over."""

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

ADVICE = "close one, or poll GET /v1/events without wait."


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
        self._held: Counter[tuple[str, ...]] = Counter()  # by (), (org,) and (org, principal)

    def admit(self, principal: Principal) -> None:
        org, name = principal.organization, principal.name
        with self._lock:
            if self._held[org, name] >= self.limits.per_principal:
                raise _over(f"This principal already holds {self.limits.per_principal}")
            if self._held[org,] >= self.limits.per_org:
                raise _over(f"This organization already holds {self.limits.per_org}")
            if self._held[()] >= self.limits.total:
                raise error(
                    503,
                    f"Too many open subscriptions on this server (limit {self.limits.total}); "
                    "retry later or poll GET /v1/events without wait.",
                )
            self._held.update(_scopes(principal))
        SUBSCRIBERS.inc()
        self.recent.subscribe(org)

    def leave(self, principal: Principal) -> None:
        self.recent.unsubscribe(principal.organization)
        SUBSCRIBERS.dec()
        with self._lock:
            self._held.subtract(_scopes(principal))
            for scope in _scopes(principal):
                if not self._held[scope]:
                    del self._held[scope]

    def client_gone(self, req: falcon.Request) -> Callable[[], bool]:
        """Whether the client has closed its connection (waiters are woken when it does)."""
        watch = req.env.get(WATCH_CLIENT)
        if watch is None:
            return lambda: False
        return watch(self.recent.wake)


def _scopes(principal: Principal) -> tuple[tuple[str, ...], ...]:
    """What a slot counts against: the limit, the organization's quota, the principal's."""
    return (), (principal.organization,), (principal.organization, principal.name)


def _over(holds: str) -> falcon.HTTPError:
    message = f"{holds} open subscriptions on this server, its quota; {ADVICE}"
    return error(429, message, TOO_MANY_SUBSCRIBERS)
