"""The organization event log's newest rows, read once per commit for every subscriber.

Rather than each open stream and waiting long-poll querying the event log after every commit,
the follower (projections/follower.py) reads the rows committed since its last read once, for all
organizations, and subscribers take theirs from memory. A reader whose cursor is older than
memory reads the table instead, as every request's first read does (`read_committed`). Memory
holds every row after `floor`, in log order: the log commits in order, so a read after the last
position held never skips a row that commits later. Nothing is read while nobody subscribes.
Each organization's subscribers wait on a signal of their own, so a commit costs the streams of
other organizations nothing (bench/streams.py).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from titen.projections.event_log import EventLog, Published

CAPACITY = 4096
"""Rows held in memory (all organizations); older cursors read the table."""
READ_BATCH = 1000


class _Organization:
    """The subscribers of one organization: how many, and the signal they wait on."""

    def __init__(self, lock: threading.Lock):
        self.subscribers = 0
        self.version = 0
        self.changed = threading.Condition(lock)

    def signal(self) -> None:
        self.version += 1
        self.changed.notify_all()


class RecentEvents:
    def __init__(self, log: EventLog, capacity: int = CAPACITY):
        self.log = log
        self._capacity = capacity
        self._lock = threading.Lock()
        self._organizations: dict[str, _Organization] = {}
        """The organizations with subscribers in this process."""
        self._floor: int | None = None
        """Every row after it is held (up to `_through`); None while nothing is held."""
        self._through = 0
        self._held: deque[tuple[str, Published]] = deque()
        self._by_organization: dict[str, deque[Published]] = {}
        self.on_first_subscriber: list[Callable[[], None]] = []
        """Called when this process goes from no subscriber to one (wakes the follower, which
        sleeps while nobody subscribes)."""

    @property
    def has_subscribers(self) -> bool:
        """Whether a stream or long-poll of this process waits for new rows (a plain read: the
        follower asks it whether to follow the log at all)."""
        return bool(self._organizations)

    def waits_for(self, organizations: frozenset[str]) -> bool:
        """Whether a stream or long-poll of this process waits for rows of any of these
        organizations (plain reads, as `has_subscribers`: a commit asks it to decide whether
        to wake the follower at all)."""
        waiting = self._organizations
        return any(organization in waiting for organization in organizations)

    def subscribe(self, organization: str) -> None:
        """A stream or long-poll starts: the follower keeps memory current from now on."""
        with self._lock:
            first = not self._organizations
            waiting = self._organizations.get(organization)
            if waiting is None:
                waiting = self._organizations[organization] = _Organization(self._lock)
            waiting.subscribers += 1
        if first:
            for wake in self.on_first_subscriber:
                wake()

    def unsubscribe(self, organization: str) -> None:
        with self._lock:
            waiting = self._organizations[organization]
            waiting.subscribers -= 1
            if not waiting.subscribers:
                del self._organizations[organization]

    def committed(self, position: int, organizations: frozenset[str]) -> None:
        """A command of this process committed rows of `organizations`: wake their subscribers
        now if they read the table (nothing held yet, or no follower, as in an app served
        in-process); the follower's next read wakes them otherwise."""
        with self._lock:
            if self._floor is None:
                for organization in organizations:
                    if (waiting := self._organizations.get(organization)) is not None:
                        waiting.signal()

    def version(self, organization: str) -> int:
        """Changes whenever rows of the organization arrive (while it has subscribers);
        `wait_past` it to sleep until then."""
        waiting = self._organizations.get(organization)
        return waiting.version if waiting is not None else 0

    def wait_past(
        self,
        organization: str,
        version: int,
        timeout: float,
        until: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Block a subscriber of the organization until its rows arrived after `version` was
        read, `until()` holds (checked whenever `wake` is called) or time is up."""
        with self._lock:
            waiting = self._organizations[organization]
            return waiting.changed.wait_for(
                lambda: waiting.version != version or until(), max(timeout, 0)
            )

    def wake(self) -> None:
        """Wake every waiter to check its `until` (a subscription's key was revoked, its
        client went away)."""
        with self._lock:
            for waiting in self._organizations.values():
                waiting.changed.notify_all()

    def _signal_all(self) -> None:
        for waiting in self._organizations.values():
            waiting.signal()

    def read(
        self,
        organization: str,
        after: int,
        types: tuple[str, ...],
        limit: int,
        party: str | None = None,
    ) -> list[Published]:
        """The organization's events after a position, oldest first (with a `party`, only those
        it is party to): from memory when it holds every row after `after`, else from the
        table."""
        newer = self._held_after(organization, after)
        if newer is None:
            return self.log.read(organization, after, types, limit, party)
        if types:
            newer = [e for e in newer if e.event["type"] in types]
        if party is not None:
            newer = [e for e in newer if party in e.parties]
        return newer[:limit]

    def _held_after(self, organization: str, after: int) -> list[Published] | None:
        """The organization's events after `after` from memory, oldest first; None when memory
        does not reach back that far."""
        with self._lock:
            if self._floor is None or after < self._floor:
                return None
            newer: list[Published] = []
            for event in reversed(self._by_organization.get(organization, ())):
                if event.position <= after:
                    break
                newer.append(event)
        newer.reverse()
        return newer

    def read_committed(
        self,
        organization: str,
        after: int,
        types: tuple[str, ...],
        limit: int,
        party: str | None = None,
    ) -> list[Published]:
        """The organization's events after a position, from the table: everything committed
        by now. Memory lags another process's commit until the follower's next pass, so a
        request's first read comes from here: a client that got a 201 from one server process
        then reads its event from any other."""
        return self.log.read(organization, after, types, limit, party)

    def refresh(self) -> None:
        """Read the rows committed since the last read (the follower calls it on each commit)."""
        with self._lock:
            if not self._organizations:
                self._forget()
                return
            start = self._through if self._floor is not None else None
        if start is None:
            self._hold_from(self.log.last_position())
            return
        while True:
            rows = self.log.tail(start, READ_BATCH)
            if rows:
                self._add(rows)
                start = rows[-1][1].position
            if len(rows) < READ_BATCH:
                return

    def _forget(self) -> None:
        self._floor = None
        self._held.clear()
        self._by_organization.clear()

    def _hold_from(self, position: int) -> None:
        """Start holding: everything up to `position` is the table's to serve."""
        with self._lock:
            self._floor = self._through = position
            self._signal_all()

    def _add(self, rows: list[tuple[str, Published]]) -> None:
        with self._lock:
            if self._floor is None:
                return  # forgotten meanwhile
            for organization, event in rows:
                self._held.append((organization, event))
                self._by_organization.setdefault(organization, deque()).append(event)
            while len(self._held) > self._capacity:
                organization, oldest = self._held.popleft()
                events = self._by_organization[organization]
                events.popleft()
                if not events:
                    del self._by_organization[organization]
                self._floor = oldest.position
            self._through = rows[-1][1].position
            for organization in {organization for organization, _ in rows}:
                if (waiting := self._organizations.get(organization)) is not None:
                    waiting.signal()
