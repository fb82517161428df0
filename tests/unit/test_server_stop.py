"""A worker whose loop has ended (SIGTERM, Ctrl-C) tells the other workers at once that it
accepts no more (`Server.run`), before waiting for its last requests: it may hold the fewest
connections, and the others, stopped beside it, must take the new ones meanwhile."""

from __future__ import annotations

import os
import select
from types import SimpleNamespace

from titen.api.rest.balance import SLACK, Shares
from titen.api.rest.connections import Server


def stopped_loop() -> None:
    raise KeyboardInterrupt  # how the loop ends on a stop (Server.maintenance)


def test_the_others_are_told_before_the_last_requests_are_waited_for():
    shares = Shares(2)
    ending, other = shares.join(0), shares.join(1)
    assert ending.accepts(0, able=True)
    assert not other.accepts(SLACK + 1, able=True)  # the ending worker holds fewer
    seen_at_shutdown: list[tuple[bool, bool]] = []

    def shutdown() -> None:
        bell = shares.bells[1][0]
        rung = bool(select.select([bell], [], [], 0)[0]) and bool(os.read(bell, 4096))
        seen_at_shutdown.append((bool(shares.able[0]), rung))

    server = object.__new__(Server)
    server.share = ending
    server.active_channels = {}
    server.adj = SimpleNamespace(asyncore_loop_timeout=1)
    server.poller = SimpleNamespace(loop=lambda timeout: stopped_loop(), close=lambda: None)
    server.task_dispatcher = SimpleNamespace(shutdown=shutdown)
    Server.run(server)
    assert seen_at_shutdown == [(False, True)]  # no longer counted on, the other one rung
    assert other.accepts(SLACK + 1, able=True)
