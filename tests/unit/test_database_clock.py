"""The database's clock as a process estimates it (storage/clock.py), with the server and the
monotonic clock played by hand: anchored at the end of a round trip, never ahead of the server,
read again when due and after a check that disagreed."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from tests.support import eventually
from titen.storage.clock import REANCHOR_SECONDS, STALE_SECONDS, DatabaseClock
from titen.storage.outages import ClockDisagrees, is_outage

BASE = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)


class Server:
    """A database server whose clock reads BASE + the monotonic clock, answering each read in
    the middle of a round trip of `trip` seconds; the monotonic clock moves only when told."""

    def __init__(self, trip: float = 0.5, skew: float = 0.0):
        self.monotonic = 100.0
        self.trip = trip
        self.skew = skew  # added to what the server answers, to play a server stepped off
        self.reads = 0

    def true_now(self) -> datetime:
        return BASE + timedelta(seconds=self.monotonic)

    def read(self) -> datetime:
        self.reads += 1
        self.monotonic += self.trip / 2
        answered = self.true_now() + timedelta(seconds=self.skew)
        self.monotonic += self.trip / 2
        return answered

    def clock(self) -> DatabaseClock:
        return DatabaseClock(self.read, monotonic=lambda: self.monotonic)

    def wait(self, seconds: float) -> None:
        self.monotonic += seconds


def test_the_estimate_trails_the_server_by_at_most_the_round_trip_and_is_never_ahead():
    server = Server(trip=0.5)
    clock = server.clock()
    for waited in (0, 0.001, 1, 8):  # 9.001 s in all: within one anchor
        server.wait(waited)
        estimate = clock.now()
        assert estimate <= server.true_now()
        assert server.true_now() - estimate <= timedelta(seconds=0.5)
    assert server.reads == 1  # one anchor carried forward by the monotonic clock


def test_it_reads_the_server_again_once_the_anchor_is_due_in_the_background():
    server = Server()
    clock = server.clock()
    clock.now()
    server.wait(REANCHOR_SECONDS - 1)
    clock.now()
    assert server.reads == 1
    server.wait(1)
    clock.now()
    eventually(lambda: server.reads == 2, "the anchor read again")


def test_a_due_anchor_is_never_read_on_the_callers_thread():
    """The caller may hold the events table's lock and a pooled connection: reading there
    took a second connection and stalled the lock 4 s when the pool had none free."""
    server = Server()
    clock = server.clock()
    clock.now()
    server.wait(REANCHOR_SECONDS)
    held = threading.Event()
    clock._read = lambda: held.wait(30) and server.read()  # type: ignore[assignment,return-value]
    estimate = clock.now()  # returns at once, from the anchor that fell due
    assert estimate <= server.true_now()
    held.set()
    eventually(lambda: server.reads == 2, "the anchor read again")


def test_the_wall_clock_of_the_process_plays_no_part():
    """A server read 5 minutes ahead of this process's wall clock is followed as it is."""
    server = Server(trip=0.0)
    server.monotonic = 300.0
    assert server.clock().now() == BASE + timedelta(seconds=300)


def test_instants_at_or_just_behind_the_database_s_clock_pass():
    server = Server()
    clock = server.clock()
    now = clock.now()
    clock.verify(now, [now, now - timedelta(seconds=STALE_SECONDS)])
    clock.now()
    assert server.reads == 1


@pytest.mark.parametrize(
    ("instant", "words"),
    [
        (timedelta(milliseconds=1), "ahead of"),
        (-timedelta(seconds=STALE_SECONDS, milliseconds=1), "more than 15 s behind"),
    ],
    ids=["ahead", "stale"],
)
def test_an_instant_ahead_or_stale_is_refused_as_an_outage_and_the_clock_reads_again(
    instant, words
):
    server = Server()
    clock = server.clock()
    database = clock.now()
    with pytest.raises(ClockDisagrees, match=words) as refused:
        clock.verify(database, [database, database + instant])
    assert is_outage(refused.value)  # answered 503 with Retry-After, like any outage
    clock.now()
    assert server.reads == 2


def test_a_server_stepped_back_is_followed_after_one_refusal():
    """The server's clock is stepped back a minute: the next transaction's clock_timestamp()
    is behind every instant the old anchor gives; refused once, the clock follows the server."""
    server = Server(trip=0.0)
    clock = server.clock()
    server.wait(1)
    decided = clock.now()
    server.skew = -60
    stepped = server.read()
    with pytest.raises(ClockDisagrees):
        clock.verify(stepped, [decided])
    assert clock.now() <= server.true_now() - timedelta(seconds=60)


def test_a_check_that_trails_less_than_the_anchor_becomes_the_anchor():
    """A transaction's clock_timestamp() that arrives sooner after the server read it than the
    anchor's did tightens the estimate, which stays behind the server."""
    server = Server(trip=0.5)
    clock = server.clock()
    decided = clock.now()
    assert server.true_now() - decided >= timedelta(seconds=0.25)
    server.wait(0.01)
    clock.verify(server.true_now() - timedelta(seconds=0.01), [decided])  # answered in 10 ms
    tighter = clock.now()
    assert tighter <= server.true_now()
    assert server.true_now() - tighter <= timedelta(seconds=0.011)
    clock.verify(server.true_now() - timedelta(seconds=0.2), [])  # a slower answer: kept
    assert clock.now() == tighter
    assert server.reads == 1
