"""Each organization's request budget on one node: token buckets the node's workers share.

The buckets live in anonymous shared memory mapped before the workers are forked, so every
worker counts in the same table; a file lock the kernel releases when its holder dies orders
them (`FileTurn`, each worker opening the file for itself), a thread lock the threads of one
process. A fixed table of SLOTS buckets, found by a hash of the organization; an organization
not seen for a while gives its slot to a new one (its bucket was full again anyway).
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import struct
import threading
import time
from dataclasses import dataclass

from titen.storage.group_commit import FileTurn

BURST_SECONDS = 2
"""The burst: this many seconds of the rate may be spent at once."""
SLOTS = 4096
PROBES = 16
"""Slots looked at for an organization, from the one its hash names."""
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
    """Made once per node, before any worker is forked (with `lock_path`, the file whose lock
    orders the workers; None for one process); `wait` is called by every request."""

    def __init__(self, rate: float, lock_path: str | None = None, slots: int = SLOTS):
        self.policy = Policy(rate)
        self._slots = slots
        self._table = mmap.mmap(-1, slots * _SLOT.size)  # shared and anonymous: forks see one
        self._lock_path = lock_path
        self._turn: tuple[int, FileTurn] | None = None
        self._threads = threading.Lock()

    def wait(self, organization: str) -> float:
        """Take one request from the organization's bucket: 0.0 when it may go on, else the
        seconds until it may (nothing is taken then)."""
        key = _key(organization)
        with self._threads:
            turn = self._process_turn()
            if turn is None:
                return self._take(key)
            turn.acquire()
            try:
                return self._take(key)
            finally:
                turn.release()

    def _process_turn(self) -> FileTurn | None:
        """This process's own opening of the lock file (a lock belongs to an open file, so
        one inherited across a fork would not exclude)."""
        if self._lock_path is None:
            return None
        if self._turn is None or self._turn[0] != os.getpid():
            self._turn = (os.getpid(), FileTurn(self._lock_path))
        return self._turn[1]

    def _take(self, key: int) -> float:
        """`wait`'s work, with the table held: the clock is read only now, so the instants
        written to a slot never go back (CLOCK_MONOTONIC, one clock for every process)."""
        now = time.monotonic()
        slot, tokens, stamp = self._find(key, now)
        burst = self.policy.burst
        tokens = min(burst, tokens + max(0.0, now - stamp) * self.policy.rate)
        if not 0 <= tokens <= burst:  # NaN: a slot a dying worker left half-written
            tokens = burst
        taken = 1 if tokens >= 1 else 0
        _SLOT.pack_into(self._table, slot * _SLOT.size, key, tokens - taken, now)
        return 0.0 if taken else (1 - tokens) / self.policy.rate

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


def _key(organization: str) -> int:
    """A nonzero 64-bit hash of the organization (0 marks an empty slot)."""
    digest = hashlib.blake2b(organization.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1
