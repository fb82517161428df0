"""Each organization's request budget on this node: a token bucket, shared by the workers.

`titen serve --org-rate N` gives every organization N requests a second, with a burst of
BURST_SECONDS times that, counted by all the server processes of the node together: the
buckets live in anonymous shared memory that the parent maps before it forks the workers,
guarded by the robust process-shared mutex the workers already share other things through
(storage/shared_mutex.py), so a worker that dies holding it stops nobody. A fixed table of
SLOTS buckets, found by a hash of the organization; an organization not seen for a while gives
its slot to a new one (its bucket was full again anyway, so it loses nothing).
"""

from __future__ import annotations

import hashlib
import math
import mmap
import struct
import threading
import time
from dataclasses import dataclass

import falcon

from titen.api.rest.errors import error
from titen.api.rest.settings import ServerSettings
from titen.storage.shared_mutex import SharedMutex

POLICY_NAME = "org"
"""The policy's name in the RateLimit fields."""
BURST_SECONDS = 2
"""The burst: this many seconds of the rate may be spent at once."""
SLOTS = 4096
PROBES = 16
"""Slots looked at for an organization, from the one its hash names."""
LOCK_TIMEOUT = 1.0
"""How long a request waits for the table; past it, it is served uncounted (never stuck)."""
_SLOT = struct.Struct("=Qdd")
"""A slot: the organization's 64-bit hash (0: empty), its tokens, when they were counted."""


@dataclass(frozen=True)
class Policy:
    rate: float
    """Requests per second, per organization."""

    @property
    def burst(self) -> int:
        return max(1, math.ceil(self.rate * BURST_SECONDS))


class OrgBudget:
    """Made once per node, before any worker is forked; `wait` is called by every worker."""

    def __init__(self, rate: float, slots: int = SLOTS):
        self.policy = Policy(rate)
        self._slots = slots
        self._table = mmap.mmap(-1, slots * _SLOT.size)  # shared and anonymous: forks see one
        self._mutex = SharedMutex()
        self._turn = threading.Lock()
        """This process's threads queue here, so that the one holding the shared mutex is
        not kept from the interpreter lock by its siblings waiting for the mutex."""

    def wait(self, organization: str) -> float:
        """Take one request from the organization's bucket: 0.0 when it may go on, else the
        seconds until it may (nothing is taken then)."""
        key = _key(organization)
        with self._turn:
            if not self._mutex.acquire(LOCK_TIMEOUT):
                return 0.0
            try:
                return self._take(key)
            finally:
                self._mutex.release()

    def _take(self, key: int) -> float:
        """`wait`'s work, with the table held: read the clock only now, so that the instants
        written to a slot never go back (one clock for every process: CLOCK_MONOTONIC)."""
        now = time.monotonic()
        slot, tokens, stamp = self._find(key, now)
        burst = self.policy.burst
        tokens = min(burst, tokens + max(0.0, now - stamp) * self.policy.rate)
        if not 0 <= tokens <= burst:  # NaN: a slot a dying worker left half-written
            tokens = burst
        if tokens >= 1:
            _SLOT.pack_into(self._table, slot * _SLOT.size, key, tokens - 1, now)
            return 0.0
        _SLOT.pack_into(self._table, slot * _SLOT.size, key, tokens, now)
        return (1 - tokens) / self.policy.rate

    def _find(self, key: int, now: float) -> tuple[int, float, float]:
        """The organization's slot, its tokens and when they were counted: its own, else an
        empty one, else the one unused longest (taken over with a full bucket)."""
        start = key % self._slots
        free: int | None = None
        stalest, stalest_stamp = start, math.inf
        for probe in range(PROBES):
            slot = (start + probe) % self._slots
            held, tokens, stamp = _SLOT.unpack_from(self._table, slot * _SLOT.size)
            if held == key:
                return slot, tokens, min(stamp, now)
            if held == 0 and free is None:
                free = slot
            elif held != 0 and stamp < stalest_stamp:
                stalest, stalest_stamp = slot, stamp
        return (stalest if free is None else free), float(self.policy.burst), now


def org_budget(settings: ServerSettings) -> OrgBudget | None:
    """The node's budget for `settings` (None with `--org-rate 0`): made before any fork."""
    return OrgBudget(settings.org_rate) if settings.org_rate > 0 else None


def _key(organization: str) -> int:
    """A nonzero 64-bit hash of the organization (0 marks an empty slot)."""
    digest = hashlib.blake2b(organization.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


def over_budget(policy: Policy, wait: float) -> falcon.HTTPError:
    """429 TOO_MANY_REQUESTS for an organization over its budget, with `Retry-After` and the
    IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers: one policy, named "org")."""
    seconds = max(1, math.ceil(wait))
    refused = error(
        429,
        f"This organization is over its request budget on this server ({policy.rate:g} "
        f"requests a second, bursts of {policy.burst}); retry in {seconds} s.",
    )
    refused.headers = {  # in place of errors.Refusal's fixed Retry-After
        "Retry-After": str(seconds),
        "RateLimit-Policy": f'"{POLICY_NAME}";q={policy.burst};w={BURST_SECONDS}',
        "RateLimit": f'"{POLICY_NAME}";r=0;t={seconds}',
    }
    return refused
