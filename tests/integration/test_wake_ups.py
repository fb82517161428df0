"""A commit wakes only threads that have something to do with it (issue 21).

A thread's voluntary context switches (/proc/self/task/TID/status) count how often it went to
sleep after being woken. While nobody subscribes, the follower sleeps on a timer of
SAFETY_POLL_SECONDS, so over a stretch of commits it may be woken at most once per that period
and once more at the edges, never once per commit.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support import acquire, eventually
from titen.projections.follower import SAFETY_POLL_SECONDS, Follower
from titen.service.background import ring_while
from titen.service.bootstrap import Services, bootstrap
from titen.service.doorbell import Doorbell
from titen.service.targets import Targets
from titen.service.webhook_presence import FRESH_SECONDS

COMMITS = 40
PER_WAKE = 3
"""Voluntary switches one wake may count: the wait itself, then waits for the GIL."""


def switches(native_id: int) -> int:
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    [line] = [x for x in status.splitlines() if x.startswith("voluntary_ctxt_switches:")]
    return int(line.split()[1])


def wakes_during_commits(
    services: Services, native_id: int, first: int, pause: float = 0
) -> tuple[int, float]:
    """How often the thread was woken while COMMITS commands committed (`pause` apart), and
    how long they took (what bounds the follower's timer)."""
    before = switches(native_id)
    started = time.monotonic()
    for n in range(first, first + COMMITS):
        acquire(services, n)
        time.sleep(pause)
    return switches(native_id) - before, time.monotonic() - started


def test_without_subscribers_a_commit_does_not_wake_the_follower(services):
    follower = Follower(services.app.recorder, services.recent_events)
    services.app.on_commit.append(follower.nudge)
    follower.start()
    try:
        eventually(lambda: follower._thread.native_id is not None, "the follower runs")
        native_id = follower._thread.native_id
        woken, took = wakes_during_commits(services, native_id, 0)
        # A woken thread that then waits for the GIL sleeps again: on a loaded machine one wake
        # counts a few switches (4 were seen in 1.07 s), still far from one per commit.
        assert woken <= PER_WAKE * (took / SAFETY_POLL_SECONDS + 2), (woken, took)

        services.recent_events.subscribe("acme")  # now someone waits for commits
        try:
            # Apart, so the follower has time to be woken: 40 commits in 38 ms once left it
            # no time to run at all, and the count proves nothing then.
            woken, took = wakes_during_commits(services, native_id, COMMITS, pause=0.01)
        finally:
            services.recent_events.unsubscribe("acme")
        assert woken > took / SAFETY_POLL_SECONDS + 2, (woken, took)
    finally:
        follower.stop()


def test_a_commit_nudges_the_follower_only_for_an_organization_subscribed_here(services):
    """64 streams of other organizations cost each acquire 0.15 ms on SQLite while every
    commit woke the follower to read its rows (docs/performance.md, "Round ten")."""
    follower = Follower(services.app.recorder, services.recent_events)  # not started: nudges stay
    services.app.on_commit.append(follower.nudge)
    services.recent_events.subscribe("globex")
    follower._nudged.clear()  # the first subscriber wakes it
    try:
        acquire(services, 0)  # acme's
        assert not follower._nudged.is_set()
        acquire(services, 1, organization="globex")
        assert follower._nudged.is_set()
    finally:
        services.recent_events.unsubscribe("globex")


def test_without_an_enabled_webhook_a_commit_does_not_ring_the_doorbell(services, key):
    presence = services.webhook_presence
    doorbell = Doorbell()
    services.app.on_commit.append(ring_while(presence.enabled, doorbell))
    rung = doorbell.version()
    for n in range(COMMITS):
        acquire(services, n)
    assert doorbell.version() == rung  # no delivery worker was woken

    owner = services.keys.authenticate(key("acme", "agent_hooks"))
    webhook, _ = services.webhooks.create(
        owner, url="http://127.0.0.1:9/hook", types=None, to_principal=None, targets=Targets(True)
    )
    acquire(services, COMMITS)
    assert doorbell.version() == rung + 1
    services.webhooks.delete(owner, webhook.webhook_id)
    acquire(services, COMMITS + 1)
    assert doorbell.version() == rung + 1


def test_commits_ask_the_store_whether_a_webhook_is_enabled_only_when_the_answer_is_stale(
    services, monkeypatch
):
    """Every save asks, inside the lock that every other save waits for (docs/performance.md,
    "Round nine"): the answer is remembered, on SQLite for FRESH_SECONDS, on PostgreSQL while
    its listener follows the changes."""
    presence = services.webhook_presence
    services.revocations.start()
    try:
        eventually(
            lambda: not presence.pushes_changes or presence._listening,
            "the listener follows webhook changes",
        )
        asked = []
        query = presence.store.query

        def counting(sql, *args, **kwargs):
            if "{consumers}" in sql:
                asked.append(sql)
            return query(sql, *args, **kwargs)

        monkeypatch.setattr(presence.store, "query", counting)
        services.app.on_commit.append(ring_while(presence.enabled, Doorbell()))
        started = time.monotonic()
        for n in range(COMMITS):
            acquire(services, n)
        took = time.monotonic() - started
        assert len(asked) <= 1 + took / FRESH_SECONDS, (len(asked), took)
    finally:
        services.revocations.stop()


def test_a_webhook_enabled_by_another_process_is_known_here(database, clock, key):
    here = bootstrap(database, clock, pool_size=4)
    there = bootstrap(database, clock, pool_size=4)
    here.revocations.start()  # on PostgreSQL: the listener that makes the cache trusted
    try:
        eventually(
            lambda: not here.webhook_presence.pushes_changes or here.webhook_presence._listening,
            "the listener follows webhook changes",
        )
        assert not here.webhook_presence.enabled()
        assert not here.webhook_presence.enabled()  # cached
        owner = there.keys.authenticate(key("acme", "agent_hooks"))
        there.webhooks.create(
            owner,
            url="http://127.0.0.1:9/hook",
            types=None,
            to_principal=None,
            targets=Targets(True),
        )
        eventually(here.webhook_presence.enabled, "the other process's webhook is seen")
    finally:
        here.revocations.stop()
        here.close()
        there.close()
