"""Workers sharing out connections (api/rest/balance.py): each stops accepting only while
another worker able to accept holds fewer, and whoever changes what a stopped worker would
decide rings it."""

from __future__ import annotations

import os
import select
import threading
import time

from hypothesis import given
from hypothesis import strategies as st

from titen.api.rest.balance import SLACK, Share, Shares


def rung(shares: Shares, slot: int) -> bool:
    """Whether `slot`'s bell has rung (emptying it, as its loop's pass does)."""
    bell = shares.bells[slot][0]
    if not select.select([bell], [], [], 0)[0]:
        return False
    os.read(bell, 4096)
    return True


def test_a_worker_holding_more_than_its_share_stops_and_is_rung_back():
    shares = Shares(2)
    a, b = shares.join(0), shares.join(1)
    assert a.accepts(SLACK, able=True)
    assert not a.accepts(SLACK + 1, able=True)  # b accepts, holding none: the next go to b
    assert not rung(shares, 0)
    assert b.accepts(1, able=True)
    assert rung(shares, 0)  # b's count came within a's reach: a looks again
    assert a.accepts(SLACK + 1, able=True)


def test_a_burst_cannot_pile_up_on_the_one_worker_left_accepting():
    """Workers stopped for a moment beside one holding none still count: the one left
    accepting stops at its share too, and rings them (before, it took every connection until
    they were scheduled again: 2, 2, 10 and 2 under wrk's 16 at once)."""
    shares = Shares(3)
    a, b, c = shares.join(0), shares.join(1), shares.join(2)
    assert not b.accepts(SLACK + 1, able=True)  # a and c hold none yet
    assert not c.accepts(SLACK + 1, able=True)
    assert a.accepts(SLACK + 2, able=True)
    assert not a.accepts(SLACK + 3, able=True)
    assert rung(shares, 1) and rung(shares, 2)
    assert b.accepts(SLACK + 1, able=True)


def test_the_last_worker_accepting_never_stops():
    shares = Shares(2)
    a, b = shares.join(0), shares.join(1)
    assert not b.accepts(0, able=False)  # at its limit: a cannot count on it
    assert a.accepts(100, able=True)


def test_a_stopped_worker_that_can_accept_no_more_is_no_longer_counted_on():
    shares = Shares(2)
    a, b = shares.join(0), shares.join(1)
    assert not a.accepts(SLACK + 1, able=True)  # b holds none: a stops
    assert not a.accepts(SLACK + 1, able=False)  # then a reaches its limit, or starts stopping
    assert b.accepts(3 * SLACK + 3, able=True)  # b is the only one able to: it accepts


def test_a_worker_able_again_is_counted_again():
    shares = Shares(2)
    a, b = shares.join(0), shares.join(1)
    assert not b.accepts(0, able=False)
    assert a.accepts(SLACK + 5, able=True)  # b cannot take any: a takes them all
    assert b.accepts(0, able=True)
    assert not a.accepts(SLACK + 5, able=True)  # b can again, holding none: the next go there


def test_a_worker_waits_for_another_decision_rather_than_accept_past_its_share():
    shares = Shares(2)
    a, b = shares.join(0), shares.join(1)
    assert b.accepts(0, able=True)
    held = threading.Event()

    def decide_for_a_moment() -> None:
        assert shares.deciding.acquire(1)
        held.set()
        time.sleep(0.01)
        shares.deciding.release()

    deciding = threading.Thread(target=decide_for_a_moment)
    deciding.start()
    assert held.wait(5)
    assert not a.accepts(SLACK + 1, able=True)  # b holds none: a stops, once it may decide
    deciding.join()


def test_a_worker_that_exits_hands_accepting_back_to_the_others():
    shares = Shares(2)
    a = shares.join(0)
    shares.join(1)
    assert not a.accepts(SLACK + 1, able=True)
    shares.leave(1)
    assert rung(shares, 0)
    assert a.accepts(SLACK + 1, able=True)


def settle(shares: Shares, workers: dict[int, Share], state: dict[int, tuple[int, bool]]):
    """Let every rung worker take its loop's pass until no bell rings."""
    for _ in range(100):
        woken = [slot for slot in workers if rung(shares, slot)]
        if not woken:
            return
        for slot in woken:
            workers[slot].accepts(*state[slot])
    raise AssertionError("the bells never stopped ringing")


passes = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 8), st.booleans(), st.booleans()), max_size=40
)


def share_allows(state: dict[int, tuple[int, bool]], slot: int) -> bool:
    """Whether `slot`'s connections are within SLACK of the fewest held by another worker able
    to accept (or no other is able)."""
    connections, _ = state[slot]
    fewest = min((n for other, (n, ok) in state.items() if other != slot and ok), default=None)
    return fewest is None or connections <= fewest + SLACK


def wrongly_stopped(shares: Shares, state: dict[int, tuple[int, bool]]) -> list[int]:
    """The workers able to accept that stopped though their share allows more."""
    return [
        slot
        for slot, (_, able) in state.items()
        if able and share_allows(state, slot) and not shares.accepting[slot]
    ]


@given(passes)
def test_some_worker_accepts_whenever_one_can(steps):
    """After any passes, exits and restarts, once the rung workers have looked again: if a
    worker is able to accept, one is accepting (a new connection never waits on nobody), each
    pass decides by the worker's share, and none able to accept is left stopped within it."""
    shares = Shares(3)
    workers = {slot: shares.join(slot) for slot in range(3)}
    state = {slot: (0, True) for slot in range(3)}
    for slot, connections, able, restart in steps:
        if restart:
            shares.leave(slot)
            workers[slot] = shares.join(slot)
            connections = 0
        state[slot] = (connections, able)
        decided = workers[slot].accepts(connections, able)
        assert decided == (able and share_allows(state, slot)), state
        settle(shares, workers, state)
        if any(able for _, able in state.values()):
            assert any(shares.accepting[slot] for slot in workers), (state, list(shares.counts))
        assert not wrongly_stopped(shares, state), (state, list(shares.counts))


def test_a_worker_that_can_accept_no_more_rings_the_stopped_even_while_another_decides():
    """At its connection limit (or stopping) a worker says so under the workers' mutex, so
    none stops meanwhile counting on it; a decision held up elsewhere delays it briefly only."""
    shares = Shares(2)
    a, b = shares.join(0), shares.join(1)
    assert not a.accepts(SLACK + 1, able=True)  # a stops: b accepts, holding none
    held, done = threading.Event(), threading.Event()

    def decide_slowly() -> None:
        assert shares.deciding.acquire(1)
        held.set()
        done.wait(5)
        shares.deciding.release()

    threading.Thread(target=decide_slowly).start()
    assert held.wait(5)
    started = time.monotonic()
    assert not b.accepts(0, able=False)
    assert time.monotonic() - started < 1
    done.set()
    assert rung(shares, 0)
    assert a.accepts(SLACK + 1, able=True)  # a takes up again: nobody else accepts
