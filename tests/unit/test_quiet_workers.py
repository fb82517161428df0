"""Delivery workers on a store with nothing to deliver say nothing when the database fails.

A failover left ~270 warnings "webhook delivery failed; retrying" per node on a store with no
webhook at all: each idle worker asks whether one is enabled, and that read failed. Once the
answer was "none", a failure to read it again is no reason to speak (the outage is reported by
the parts that need the database); once it was "some", it still is."""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import SimpleNamespace

import psycopg

from tests.support import eventually
from titen.service.doorbell import Doorbell
from titen.service.workers import Workers


def run_until_asked(first: bool, times: int) -> None:
    """Workers whose `wanted()` answers `first`, then fails as a database gone away does,
    run until it was asked `times` times (the doorbell wakes them rather than their poll)."""
    asked: list[int] = []

    def wanted() -> bool:
        asked.append(1)
        if len(asked) == 1:
            return first
        raise psycopg.OperationalError("connection to server failed: Connection refused")

    doorbell = Doorbell()
    quiet: Callable[[], None] = lambda: None  # noqa: E731
    workers = Workers(
        SimpleNamespace(heartbeat=quiet, release=quiet),  # type: ignore[arg-type]
        SimpleNamespace(kind="webhook"),  # type: ignore[arg-type]
        doorbell,
        2,
        claim=lambda: None,
        wanted=wanted,
    )
    workers.start()
    try:
        eventually(lambda: doorbell.ring_all() or len(asked) >= times, "the workers ask again")
    finally:
        workers.stop()


def delivery_warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "titen.delivery" and r.levelno >= logging.WARNING
    ]


def test_workers_with_nothing_to_deliver_say_nothing_while_the_database_fails(caplog):
    caplog.set_level(logging.DEBUG, logger="titen.delivery")
    run_until_asked(first=False, times=6)
    assert delivery_warnings(caplog) == []


def test_workers_with_something_to_deliver_still_report_the_database_failing(caplog):
    caplog.set_level(logging.DEBUG, logger="titen.delivery")
    run_until_asked(first=True, times=3)
    assert any("webhook delivery failed; retrying" in m for m in delivery_warnings(caplog))
