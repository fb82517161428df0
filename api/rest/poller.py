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
"""

from __future__ import annotations

import select
from collections import deque
from contextlib import suppress
from typing import Any

from waitress import wasyncore

READ = select.EPOLLIN | select.EPOLLPRI
WRITE = select.EPOLLOUT


class Poller:
    """One server's loop over `map` (descriptor -> dispatcher), which other threads may change."""

    def __init__(self, map: dict[int, Any]):
        self.map = map
        self.epoll = select.epoll()
        self.rescan = True
        """Ask every dispatcher at the next pass (the first pass does)."""
        self.registered: dict[int, tuple[Any, int]] = {}
        """What each descriptor is registered for in the epoll set, and for which dispatcher."""
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
        try:
            ready = self.epoll.poll(timeout)
        except InterruptedError:
            ready = []
        for fd, flags in ready:
            self.asking.add(fd)  # its answers may change once it is handled
            dispatcher = self.map.get(fd)
            if dispatcher is not None:
                wasyncore.readwrite(dispatcher, flags)

    def close(self) -> None:
        self.epoll.close()

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
        idle = getattr(dispatcher, "idle", None)
        if idle is None or not idle():
            self.asking.add(fd)
        if not self._register(fd, dispatcher, _flags(dispatcher)):
            self.asking.add(fd)  # closed by its thread meanwhile: its removal is told

    def _register(self, fd: int, dispatcher: Any, flags: int) -> bool:
        """Whether `fd` is now registered for `flags` (none: not at all, since epoll reports a
        hang-up even on a descriptor registered for nothing, and a connection whose request is
        being served would make every pass return at once)."""
        current = self.registered.get(fd)
        if current == (dispatcher, flags):
            return True
        try:
            if flags and current is not None and current[0] is dispatcher:
                self.epoll.modify(fd, flags)
            else:
                self._unregister(fd)  # another dispatcher's, perhaps, on a reused number
                if not flags:
                    return True
                self.epoll.register(fd, flags)
        except OSError:
            self.registered.pop(fd, None)
            return False
        self.registered[fd] = (dispatcher, flags)
        return True

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
