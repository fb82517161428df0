"""The server's loop: waitress's dispatchers polled through epoll, asking only what may change.

Waitress's `poll2` asks every open connection `readable()` and `writable()` on every pass and
registers them all anew. At 2,000 open connections that took 2.5 ms a pass, and every request
thread waited for the interpreter lock through it (docs/performance.md, "Round ten"). Here the
registrations stay in one epoll set between passes, and a pass asks again only:

- the dispatchers that cannot say they are idle (the listening socket, the trigger, a bell), and
  the connections that were not idle when last asked (a request is being served on them);
- the connections that were ready at the last pass, or that were opened or closed since;
- the connections whose threads told the loop that their answers may have changed (`changed`);
- every dispatcher, at the pass after `rescan` was set (the server's maintenance, which may
  close any connection, sets it).

A dispatcher is idle (its `idle()` says so) when its answers change only through its socket or
through a thread that tells the loop; one without `idle` is never idle. `idle()` is asked before
`readable()` and `writable()`: a change after it is then either in those answers or told.

A registration may be wider than what its dispatcher wants now: it is widened at once, but
narrowed only when it reports something not wanted (which is then not handled, as `poll2`
would not have reported it). The dispatcher is asked again first: a connection asked while
its request was served reads again once the request ends, and its thread does not wake the
loop for that when the registration for reading is still in place (api/rest/connections.py,
`Channel.loop_will_hear`): the client's next request is what wakes it.

A keep-alive connection wants nothing while its request is served and to read again after:
narrowing at once cost two `epoll_ctl` calls per request, and `GET /healthz` at 16
connections 0.01-0.02 ms of CPU each (docs/performance.md, "Round ten"). Only reading is
narrowed late: a socket is nearly always writable, so a registration wider by
writing would be reported at the very next pass anyway (narrowed, it keeps its reading).
"""

from __future__ import annotations

import select
from collections import deque
from contextlib import suppress
from typing import Any

from waitress import wasyncore

READ = select.EPOLLIN | select.EPOLLPRI
WRITE = select.EPOLLOUT
HANGUP = select.EPOLLHUP | select.EPOLLERR
"""Reported whatever a descriptor is registered for."""


class Registration:
    """A descriptor's entry in the epoll set: whose it is, what it is registered for, and what
    its dispatcher wanted when last asked (never more than registered)."""

    __slots__ = ("dispatcher", "flags", "wanted")

    def __init__(self, dispatcher: Any, flags: int):
        self.dispatcher = dispatcher
        self.flags = self.wanted = flags


class Poller:
    """One server's loop over `map` (descriptor -> dispatcher), which other threads may change."""

    def __init__(self, map: dict[int, Any]):
        self.map = map
        self.epoll = select.epoll()
        self.rescan = True
        """Ask every dispatcher at the next pass (the first pass does)."""
        self.registered: dict[int, Registration] = {}
        self.asking: set[int] = set()
        """The descriptors to ask at the next pass: not idle, or ready at the last pass."""
        self.told: deque[int] = deque()
        """Descriptors other threads said may have changed (appended and popped atomically)."""

    def changed(self, fd: int | None) -> None:
        """Ask `fd` again at the next pass (from any thread): a dispatcher was added or removed
        there, or its answers may have changed. Whoever calls this wakes the loop if it must
        act soon (the server's trigger); the pass after the next wakeup asks it anyway."""
        if fd is not None:
            self.told.append(fd)

    def loop(self, timeout: float) -> None:
        """Poll until the map is empty (or an exception ends the loop, as KeyboardInterrupt
        does), waiting at most `timeout` seconds a pass."""
        while self.map:
            self.poll(timeout)

    def poll(self, timeout: float) -> None:
        """One pass: ask what may have changed, wait for readiness, handle what is ready."""
        for fd in self._to_ask():
            self._ask(fd)
        if self.rescan or self.told:
            timeout = 0  # changed while asked (the server's maintenance runs then): ask again
        for fd, events in self.epoll.poll(timeout):
            self.asking.add(fd)  # its answers may change once it is handled
            entry = self.registered.get(fd)
            if entry is None:
                continue
            handled = self._handled(fd, entry, events)
            if handled != events:
                self._narrow(fd, entry)
            if handled and self.map.get(fd) is entry.dispatcher:
                wasyncore.readwrite(entry.dispatcher, handled)

    def close(self) -> None:
        self.epoll.close()

    def reading(self, fd: int, dispatcher: Any) -> bool:
        """Whether `fd` is registered for reading, for `dispatcher` (from any thread). A
        registration loses reading only when it reported something not wanted (`_narrow`),
        or when its dispatcher is gone: in the first case the descriptor is asked again
        before the loop waits, so a thread that saw it registered need not wake the loop."""
        entry = self.registered.get(fd)
        return entry is not None and entry.dispatcher is dispatcher and bool(entry.flags & READ)

    def _handled(self, fd: int, entry: Registration, events: int) -> int:
        """What of `events` the dispatcher wants handled; asked again if it wanted less when
        last asked (a request served then may have ended since, and it may read again)."""
        if events & ~(entry.wanted | HANGUP) and self.map.get(fd) is entry.dispatcher:
            entry.wanted = _flags(entry.dispatcher) & entry.flags
        return events & (entry.wanted | HANGUP) if entry.wanted else 0

    def _to_ask(self) -> set[int]:
        asking, self.asking = self.asking, set()
        while self.told:
            asking.add(self.told.popleft())
        if self.rescan:
            self.rescan = False
            asking.update(self.map)
            asking.update(self.registered)  # closed since, perhaps without being told
        return asking

    def _ask(self, fd: int) -> None:
        """Register `fd` for what its dispatcher now wants (nothing if it is gone), and keep
        asking it while it is not idle."""
        dispatcher = self.map.get(fd)
        if dispatcher is None:
            self._unregister(fd)
            return
        idle = getattr(type(dispatcher), "idle", None)  # not through wasyncore's __getattr__
        if idle is None or not idle(dispatcher):
            self.asking.add(fd)
        if not self._register(fd, dispatcher, _flags(dispatcher)):
            self.asking.add(fd)  # closed by its thread meanwhile: its removal is told

    def _register(self, fd: int, dispatcher: Any, wanted: int) -> bool:
        """Whether `fd` is now registered for at least what its dispatcher `wanted` (nothing
        registered for nothing: epoll reports a hang-up even then, and a connection whose
        request is being served would make every pass return at once)."""
        entry = self.registered.get(fd)
        if entry is not None and entry.dispatcher is dispatcher:
            entry.wanted = wanted
            if not wanted & ~entry.flags and not entry.flags & ~wanted & WRITE:
                return True  # within the registration (but writability, reported at once)
            flags = wanted | entry.flags & READ  # reading is narrowed only late (`_narrow`)
            if not flags:
                self._unregister(fd)
                return True
            try:
                self.epoll.modify(fd, flags)
            except OSError:
                del self.registered[fd]
                return False
            entry.flags = flags
            return True
        self._unregister(fd)  # another dispatcher's, on a reused descriptor number
        if not wanted:
            return True
        try:
            self.epoll.register(fd, wanted)
        except OSError:
            return False
        self.registered[fd] = Registration(dispatcher, wanted)
        return True

    def _narrow(self, fd: int, entry: Registration) -> None:
        """Register `fd` for no more than its dispatcher wants: it reported something else."""
        if not entry.wanted:
            self._unregister(fd)
            return
        try:
            self.epoll.modify(fd, entry.wanted)
        except OSError:
            del self.registered[fd]  # closed meanwhile: it is asked again at the next pass
            return
        entry.flags = entry.wanted

    def _unregister(self, fd: int) -> None:
        if self.registered.pop(fd, None) is None:
            return
        with suppress(OSError):  # closed already, which removed it from the set
            self.epoll.unregister(fd)


def _flags(dispatcher: Any) -> int:
    """What waitress's `poll2` would register the dispatcher for."""
    flags = READ if dispatcher.readable() else 0
    if dispatcher.writable() and not dispatcher.accepting:
        flags |= WRITE
    return flags
