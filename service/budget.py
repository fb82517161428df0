"""Each organization's request budget on one node: a token bucket per organization.

One process keeps its buckets in a dict under a thread lock. The workers of a server share
theirs: a table in anonymous shared memory mapped before they are forked, ordered by a file
lock the kernel releases when its holder dies (`FileTurn`, each worker opening the file for
itself). Its SLOTS slots are found by the organization's `hash()`, the same in every worker
(forked from one interpreter, they share its hash seed). Either way, past SLOTS organizations
the one unused longest gives its bucket up (its bucket was full again anyway).
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import threading
import time
from dataclasses import dataclass
from functools import cached_property

from titen.storage.group_commit import FileTurn

BURST_SECONDS = 2
"""The burst: this many seconds of the rate may be spent at once."""
SLOTS = 4096
PROBES = 16
"""Shared slots looked at for an organization, from the one its hash names."""
_SLOT = struct.Struct("=Qdd")
"""A shared slot: the organization's 64-bit hash (0: empty), its tokens, when they were counted."""
_HASH_BITS = (1 << 64) - 1


@dataclass(frozen=True)
class Policy:
    rate: float
    """Requests per second, per organization."""

    @cached_property
    def burst(self) -> int:
        return max(1, math.ceil(self.rate * BURST_SECONDS))

    def take(self, tokens: float, since: float, now: float) -> tuple[float, float]:
        """A bucket that held `tokens` at `since`, asked for one request at `now`: the tokens it
        holds after, and 0.0 when the request may go on, else the seconds until it may."""
        burst = self.burst
        tokens = min(burst, tokens + max(0.0, now - since) * self.rate)
        if not 0 <= tokens <= burst:  # NaN: a shared slot a dying worker left half-written
            tokens = burst
        if tokens >= 1:
            return tokens - 1, 0.0
        return tokens, (1 - tokens) / self.rate


class OrgBudget:
    """Made once per node, before any worker is forked: with `lock_path` (the file whose lock
    orders the workers) its buckets are shared by the processes forked from this one, without it
    they are this process's. `wait` is called by every request."""

    def __init__(self, rate: float, lock_path: str | None = None, slots: int = SLOTS):
        self.policy = Policy(rate)
        self._buckets = _Local(slots) if lock_path is None else _Shared(slots, lock_path)

    def wait(self, organization: str) -> float:
        """Take one request from the organization's bucket: 0.0 when it may go on, else the
        seconds until it may (nothing is taken then)."""
        return self._buckets.take(organization, self.policy)


class _Local:
    """One process's buckets: (tokens, when counted) by organization, the least recently used
    first (each use moves an organization to the end)."""

    def __init__(self, slots: int):
        self._slots = slots
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, organization: str, policy: Policy) -> float:
        with self._lock:
            now = time.monotonic()
            tokens, since = self._buckets.pop(organization, (float(policy.burst), now))
            if len(self._buckets) >= self._slots:
                del self._buckets[next(iter(self._buckets))]
            tokens, wait = policy.take(tokens, since, now)
            self._buckets[organization] = (tokens, now)
            return wait


class _Shared:
    """The workers' buckets, in a table every process forked from this one maps."""

    def __init__(self, slots: int, lock_path: str):
        self._slots = slots
        self._table = mmap.mmap(-1, slots * _SLOT.size)  # shared and anonymous: forks see one
        self._lock_path = lock_path
        self._turn: tuple[int, FileTurn] | None = None
        self._opening = threading.Lock()

    def take(self, organization: str, policy: Policy) -> float:
        key = hash(organization) & _HASH_BITS or 1  # 0 marks an empty slot
        turn = self._process_turn()
        turn.acquire()  # the process's threads, then the processes
        try:
            now = time.monotonic()  # read with the table held: a slot's instants never go back
            slot, tokens, since = self._find(key, now, policy)
            tokens, wait = policy.take(tokens, since, now)
            _SLOT.pack_into(self._table, slot * _SLOT.size, key, tokens, now)
            return wait
        finally:
            turn.release()

    def _process_turn(self) -> FileTurn:
        """This process's own opening of the lock file (a lock belongs to an open file, so
        one inherited across a fork would not exclude)."""
        turn = self._turn
        if turn is None or turn[0] != os.getpid():
            with self._opening:
                if self._turn is None or self._turn[0] != os.getpid():
                    self._turn = (os.getpid(), FileTurn(self._lock_path))
                turn = self._turn
        return turn[1]

    def _find(self, key: int, now: float, policy: Policy) -> tuple[int, float, float]:
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
        return (stalest if free is None else free), float(policy.burst), now
