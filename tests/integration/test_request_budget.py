"""One deadline over every wait of a request on PostgreSQL (storage/request_budget.py).

Each of titen's overrides of the pool and the connection ends its wait by the request's
deadline, well before its own bound: the pool's wait for a connection (psycopg_pool's getconn,
4 s of its own), a statement's answer (8 s of its own), and a commit's waits end earlier
still, keeping time to settle it; with too little left a commit is not begun at all.
"""

from __future__ import annotations

import threading
import time

import pytest
from eventsourcing.persistence import OperationalError

from titen.service.bootstrap import bootstrap
from titen.storage import request_budget
from titen.storage.outages import NotCommitted

BOUND = 0.5
SLACK = 0.5
"""What the checks allow beyond the deadline: a loaded machine's scheduling, never a wait's own
bound (4 s and 8 s)."""


@pytest.fixture
def datastore(postgres_database):
    services = bootstrap(postgres_database, pool_size=1)
    try:
        yield services.app.recorder.datastore
    finally:
        services.close()


def test_the_wait_for_a_pooled_connection_ends_by_the_request_deadline(datastore):
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with datastore.get_connection():
            taken.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(10)
        began = time.monotonic()
        with (
            request_budget.request(BOUND),
            pytest.raises(OperationalError),
            datastore.get_connection(),
        ):
            pass
        assert time.monotonic() - began < BOUND + SLACK
    finally:
        release.set()
        holder.join()


def test_an_answer_that_does_not_come_ends_by_the_request_deadline(datastore):
    began = time.monotonic()
    with (
        request_budget.request(BOUND),
        pytest.raises(OperationalError),
        datastore.get_connection() as conn,
    ):
        conn.execute("SELECT pg_sleep(5)")
    assert time.monotonic() - began < BOUND + SLACK


def test_a_commit_keeps_time_to_be_settled_and_is_not_begun_without_it():
    with request_budget.request(request_budget.SETTLE_SECONDS + 1.0):
        with request_budget.committing():
            assert request_budget.left(10.0) <= 1.0  # the settling's seconds are kept back
        assert request_budget.left(10.0) > request_budget.SETTLE_SECONDS
    with (
        request_budget.request(request_budget.SETTLE_SECONDS),
        pytest.raises(NotCommitted),
        request_budget.committing(),
    ):
        pass
    assert request_budget.left(10.0) == 10.0  # outside a request: each wait's own bound
