"""The server's loop asks a connection again only when it may have changed (`Poller`),
tried on real sockets with dispatchers that count what they are asked."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from titen.api.rest.connections import READ, Poller


class Dispatcher:
    """A connection as the loop sees it, with answers the test sets and a record of its calls."""

    accepting = False

    def __init__(self, sock: socket.socket, *, idle: bool = True, readable: bool = True):
        self.sock = sock
        self.is_idle = idle
        self.is_readable = readable
        self.is_writable = False
        self.calls: list[str] = []

    def idle(self) -> bool:
        self.calls.append("idle")
        return self.is_idle

    def readable(self) -> bool:
        self.calls.append("readable")
        return self.is_readable

    def writable(self) -> bool:
        self.calls.append("writable")
        return self.is_writable

    def handle_read_event(self) -> None:
        self.calls.append("read")
        self.sock.recv(4096)

    def handle_write_event(self) -> None:
        self.calls.append("write")

    def handle_close(self) -> None:
        self.calls.append("close")

    def handle_error(self) -> None:
        raise AssertionError("the loop failed to handle an event")

    def asked(self) -> int:
        """How many times the loop asked what it wants, since last counted."""
        count = self.calls.count("readable")
        self.calls.clear()
        return count


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    """Connected socket pairs, closed at the end: ask `pair()` for one."""
    made: list[tuple[socket.socket, socket.socket]] = []
    yield made
    for ours, theirs in made:
        ours.close()
        theirs.close()


def pair(made: list[tuple[socket.socket, socket.socket]]) -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    made.append((ours, theirs))
    return ours, theirs


def delivered(poller: Poller, dispatcher: Dispatcher, peer: socket.socket) -> bool:
    """Whether a byte from `peer` now reaches `dispatcher` through the loop."""
    peer.send(b"x")
    poller.poll(0.5)
    return "read" in dispatcher.calls


def test_an_idle_connection_is_asked_again_only_when_ready_or_told(pairs):
    ours, theirs = pair(pairs)
    dispatcher = Dispatcher(ours)
    poller = Poller({ours.fileno(): dispatcher})
    poller.poll(0)
    assert dispatcher.asked() == 1
    poller.poll(0)
    assert dispatcher.asked() == 0  # idle, and nothing happened
    assert delivered(poller, dispatcher, theirs)
    poller.poll(0)
    assert dispatcher.asked() == 1  # it was ready: its answers may have changed
    poller.poll(0)
    assert dispatcher.asked() == 0
    poller.changed(ours.fileno())
    poller.poll(0)
    assert dispatcher.asked() == 1


def test_a_busy_connection_is_asked_at_every_pass_and_a_rescan_asks_all(pairs):
    busy = Dispatcher(pair(pairs)[0], idle=False)
    quiet = Dispatcher(pair(pairs)[0])
    poller = Poller({busy.sock.fileno(): busy, quiet.sock.fileno(): quiet})
    for _ in range(3):
        poller.poll(0)
    assert (busy.asked(), quiet.asked()) == (3, 1)
    poller.rescan = True
    poller.poll(0)
    assert (busy.asked(), quiet.asked()) == (1, 1)


@pytest.mark.parametrize("change", ["rescan", "told"])
def test_a_change_made_while_asking_does_not_wait_for_the_timeout(pairs, change):
    """The server's maintenance runs inside its `readable()`, as waitress's does, and may mark
    any connection to close (a rescan); a thread may tell of a change meanwhile: the pass must
    not wait out its timeout before acting on either."""
    ours, _ = pair(pairs)
    server = Dispatcher(ours, idle=False, readable=False)
    poller = Poller({ours.fileno(): server})

    def maintenance() -> bool:
        if change == "rescan":
            poller.rescan = True
        else:
            poller.changed(ours.fileno())
        return False

    server.readable = maintenance  # type: ignore[method-assign]
    started = time.monotonic()
    poller.poll(1.0)
    assert time.monotonic() - started < 0.5


def test_idle_is_asked_before_what_the_connection_wants(pairs):
    """A thread that changes the connection after `idle()` changes what `readable()` says
    next, or tells the loop; asked the other way round, a change between the two is lost."""
    dispatcher = Dispatcher(pair(pairs)[0])
    Poller({dispatcher.sock.fileno(): dispatcher}).poll(0)
    assert dispatcher.calls == ["idle", "readable", "writable"]


def test_a_connection_that_wants_nothing_does_not_wake_the_loop_when_its_peer_hangs_up(pairs):
    """epoll reports a hang-up even for a descriptor registered for nothing: one whose request
    is being served would end every pass at once, spinning the loop."""
    ours, theirs = pair(pairs)
    dispatcher = Dispatcher(ours, idle=False, readable=False)
    poller = Poller({ours.fileno(): dispatcher})
    theirs.close()
    started = time.monotonic()
    poller.poll(0.2)
    assert time.monotonic() - started >= 0.15
    assert "close" not in dispatcher.calls


def test_a_registration_wider_than_wanted_is_narrowed_when_it_reports_the_rest(pairs):
    """A connection that read a request wants nothing while it is served: it stays registered
    for reading (no system call) until epoll reports it readable, which is then not handled,
    and the registration narrowed, so that the loop does not spin on it."""
    ours, theirs = pair(pairs)
    dispatcher = Dispatcher(ours)
    poller = Poller({ours.fileno(): dispatcher})
    poller.poll(0)
    dispatcher.is_idle = dispatcher.is_readable = False  # a request is being served
    poller.changed(ours.fileno())
    poller.poll(0)
    assert poller.registered[ours.fileno()].flags  # still registered for reading
    theirs.send(b"pipelined")
    poller.poll(0.5)
    assert "read" not in dispatcher.calls
    assert ours.fileno() not in poller.registered
    started = time.monotonic()
    poller.poll(0.2)
    assert time.monotonic() - started >= 0.15


def test_a_registration_reporting_what_was_not_wanted_asks_again_before_narrowing(pairs):
    """A request's thread that ends its request does not wake the loop when the connection is
    still registered for reading (api/rest/connections.py, `Channel.loop_will_hear`): the
    client's next request does, and it is read at once, the registration kept as it is."""
    ours, theirs = pair(pairs)
    dispatcher = Dispatcher(ours)
    poller = Poller({ours.fileno(): dispatcher})
    poller.poll(0)
    dispatcher.is_idle = False  # a request is being served, which ends, untold, while the
    answers = iter([False, True])  # loop waits: it was asked before, and after, the end
    dispatcher.readable = lambda: next(answers)  # type: ignore[method-assign]
    poller.changed(ours.fileno())
    assert delivered(poller, dispatcher, theirs)
    assert poller.registered[ours.fileno()].flags == READ
    assert poller.reading(ours.fileno(), dispatcher)
    assert not poller.reading(ours.fileno(), Dispatcher(ours))  # another's, on that number


def test_a_registration_narrowed_for_writing_keeps_its_reading(pairs):
    """A request's thread skips the loop's wake-up when the connection is registered for
    reading (`Poller.reading`): the loop may not drop that registration while it waits,
    unless the descriptor reported something (it is asked again before the next wait)."""
    ours, _ = pair(pairs)
    dispatcher = Dispatcher(ours)
    dispatcher.is_writable = True  # the loop sends what a thread left
    poller = Poller({ours.fileno(): dispatcher})
    poller.poll(0)
    dispatcher.is_idle = dispatcher.is_readable = dispatcher.is_writable = False  # a request
    poller.changed(ours.fileno())
    poller.poll(0)
    assert poller.registered[ours.fileno()].flags == READ
    assert poller.reading(ours.fileno(), dispatcher)


def test_a_descriptor_closed_by_another_thread_while_asked_is_asked_again(pairs):
    ours, _ = pair(pairs)
    dispatcher = Dispatcher(ours)
    dispatchers = {ours.fileno(): dispatcher}
    poller = Poller(dispatchers)

    def closed_meanwhile() -> bool:
        ours.close()  # as a request's thread may close its connection
        return True

    dispatcher.readable = closed_meanwhile  # type: ignore[method-assign]
    poller.poll(0)  # registering fails: the descriptor is gone
    assert poller.asking  # so it is asked again
    dispatchers.clear()  # the close removes it from the map, and tells
    poller.poll(0)
    assert not poller.asking and not poller.registered


@pytest.mark.parametrize("pass_between", [False, True])
def test_a_reused_descriptor_number_is_registered_for_its_new_connection(pairs, pass_between):
    """A connection closed and another opened on the same descriptor number, told both times:
    the new one is registered whether or not the loop passed between the two."""
    first, _ = pair(pairs)
    made, theirs = pair(pairs)  # the next connection, moved onto the first's number below
    fd = first.fileno()
    dispatchers = {fd: Dispatcher(first)}
    poller = Poller(dispatchers)
    poller.poll(0)
    del dispatchers[fd]
    first.close()
    poller.changed(fd)
    if pass_between:
        poller.poll(0)
    os.dup2(made.fileno(), fd)  # as accept gives the lowest free number
    ours = socket.socket(fileno=fd)
    pairs.append((ours, theirs))
    made.close()
    dispatcher = dispatchers[fd] = Dispatcher(ours)
    poller.changed(fd)
    poller.poll(0)
    assert poller.registered[fd].dispatcher is dispatcher and not poller.asking
    assert delivered(poller, dispatcher, theirs)
