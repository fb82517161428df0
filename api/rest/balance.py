"""Connections shared out evenly between the workers of one `titen serve --workers N`.

Every worker accepts from one listening socket, and the kernel gives a new connection to
whichever worker polls first. In a burst (a client's pool opening 16 connections at once) that
was nearly always the same one: 15 of 16 connections on one worker, which served them all on
one core while the other worker idled (docs/performance.md, "Round four"). So each worker
publishes how many connections it holds, in memory all of them share, and stops accepting while
another worker able to accept holds fewer (by more than SLACK), whether that one accepts right
now or stopped earlier: the next connections go there. Counting only the workers accepting at
that moment let a burst (wrk opening 16 at once) pile up on one worker: the others, each
stopped for a moment beside a worker holding none yet, did not count, so the one left
accepting took everything until they had been scheduled again (2, 2, 10 and 2 connections, at
a fifth fewer acquires per second; docs/performance.md, "Round fifteen"). Each worker accepts
at most one connection per pass and publishes its count at the next, so the counts it decides
by trail by one at most: once every worker has joined, a burst ends within SLACK + 1 of even
(unless a decision's wait for the mutex below runs out).

Two rules keep a new connection from waiting on nobody:

- a worker stops accepting only while another worker able to accept holds fewer connections,
  decided under a mutex the workers share, so the one holding the fewest never stops and two
  cannot each leave it to the other (taking up accepting again needs nobody's leave; one that
  can accept no more, at its connection limit or its loop ended, says so under the mutex too,
  and rings the others);
- a worker that stopped looks at its share again only once a second (its loop's timeout)
  unless rung, so whoever changes what it would decide rings its bell (a pipe in its loop): a
  worker whose connections grow in number, or that can accept no more (at its connection
  limit, or its loop ended), rings the stopped workers that may now take up accepting, and the
  supervisor, when a worker exits and its slot is marked gone, rings them all.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import suppress
from multiprocessing.sharedctypes import RawArray
from typing import Any

from waitress import wasyncore

from titen.storage.shared_mutex import SharedMutex

SLACK = 1
"""How many more connections than another worker able to accept a worker may hold and still
accept."""
GONE = -1
"""A slot's count while no worker holds it."""
DECIDING_WAIT_SECONDS = 0.05
"""How long a worker waits for another's decision before deciding without the mutex: its holder
decides in microseconds (plus, under load, the wait for its own interpreter lock), so a worker
that would stop waits rather than accept beyond its share, and one that can accept no more says
so anyway past the wait. A holder that never releases it (a frozen process) costs a worker over
its share this wait at each of its passes, and it keeps accepting."""


class Shares:
    """The workers' slots: made by the supervisor before it forks them, one slot per worker."""

    def __init__(self, workers: int):
        self.counts = RawArray(ctypes.c_int, [GONE] * workers)
        self.accepting = RawArray(ctypes.c_bool, [False] * workers)
        self.able = RawArray(ctypes.c_bool, [False] * workers)
        """Whether each worker may take more connections (not at its limit, its loop running)."""
        self.deciding = SharedMutex()
        self.bells = [os.pipe() for _ in range(workers)]
        for _, ring in self.bells:
            os.set_blocking(ring, False)

    def join(self, slot: int) -> Share:
        """A new worker's slot (in the worker): no connections yet, accepting."""
        self.counts[slot] = 0
        self.accepting[slot] = True
        self.able[slot] = True
        return Share(self, slot)

    def leave(self, slot: int) -> None:
        """A worker has exited (in the supervisor): its slot counts for nothing until reused,
        and the others look again, in case they counted on it."""
        self.accepting[slot] = False
        self.able[slot] = False
        self.counts[slot] = GONE
        for other in range(len(self.counts)):
            self.ring(other)

    def ring(self, slot: int) -> None:
        """Wake the worker in `slot` to look at its share again (at once, from any process)."""
        with suppress(BlockingIOError):  # the pipe is full: it is woken already
            os.write(self.bells[slot][1], b"!")


class Share:
    """One worker's slot, which its server's loop reads and writes at every pass."""

    def __init__(self, shares: Shares, slot: int):
        self.shares = shares
        self.slot = slot

    def bell(self, loop: dict[int, Any]) -> None:
        """Put this worker's bell in its server's `loop`, which a ring then wakes."""
        _Bell(self.shares.bells[self.slot][0], loop)

    def accepts(self, connections: int, able: bool) -> bool:
        """Whether this worker should accept now, holding `connections` and `able` to accept
        more (not at its connection limit, its loop running)."""
        shares, slot = self.shares, self.slot
        grew = connections > shares.counts[slot]
        shares.counts[slot] = connections
        accepting = self._decide(connections, able)
        if grew:  # a stopped worker that held more may now hold few enough, whatever this decided
            self._ring_stopped(connections)
        return accepting

    def _decide(self, connections: int, able: bool) -> bool:
        shares, slot = self.shares, self.slot
        if not able:
            if shares.able[slot]:  # it cannot: the others must not count on it
                self._stop_accepting()
            return False
        shares.able[slot] = True
        if connections <= self._fewest_elsewhere() + SLACK:
            shares.accepting[slot] = True
            return True
        if not shares.accepting[slot]:
            return False
        if not shares.deciding.acquire(DECIDING_WAIT_SECONDS):
            return True  # another worker's decision is held up: keep accepting, ask next pass
        try:
            if connections <= self._fewest_elsewhere() + SLACK:
                return True
            shares.accepting[slot] = False
            return False
        finally:
            shares.deciding.release()

    def _stop_accepting(self) -> None:
        """Stop accepting and stop being counted on (this worker is at its limit, or its loop
        has ended), whether or not another worker accepts, and ring those that stopped: under
        the mutex, so that none stops meanwhile counting on this one and goes unrung. The
        mutex is waited for briefly, and past the wait the ring still goes out."""
        shares = self.shares
        decided = shares.deciding.acquire(DECIDING_WAIT_SECONDS)
        try:
            shares.accepting[self.slot] = False
            shares.able[self.slot] = False
            self._ring_stopped(float("inf"))
        finally:
            if decided:
                shares.deciding.release()

    def _fewest_elsewhere(self) -> float:
        """The fewest connections another worker able to accept holds (infinite if none is)."""
        shares, slot = self.shares, self.slot
        fewest = float("inf")
        for other, count in enumerate(shares.counts):
            if other != slot and shares.able[other] and 0 <= count < fewest:
                fewest = count
        return fewest

    def _ring_stopped(self, connections: float) -> None:
        """Ring each stopped worker that holds few enough connections to accept again beside
        this one, now holding `connections` (infinite: this one can accept no more)."""
        shares = self.shares
        for other, count in enumerate(shares.counts):
            stopped = other != self.slot and not shares.accepting[other] and count >= 0
            if stopped and count <= connections + SLACK:
                shares.ring(other)


class _Bell(wasyncore.file_dispatcher):
    """The read end of a worker's bell in its server's loop: readable when rung, emptied then
    (the loop's next pass is the point: it asks the worker's share again)."""

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def handle_read(self) -> None:
        with suppress(OSError):
            self.recv(4096)

    def handle_close(self) -> None:
        self.close()
