"""A save of many aggregates at once, as group commit makes one under load: its events take
consecutive log positions in the order given, and every read-model row is written, on both
backends. On PostgreSQL the save sends the events as one statement (rows of VALUES up to
VALUES_ROWS events, four arrays beyond) and the read models' rows as one statement per
MERGED_ROWS rows of a table, every table's INSERT in each (storage/postgres.py,
projections/store.py)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from titen.domain.lease import Lease
from titen.projections.store import MERGED_ROWS
from titen.service.bootstrap import Services, bootstrap
from titen.storage.postgres import VALUES_ROWS

SIZES = [
    1,
    VALUES_ROWS // 2,
    VALUES_ROWS // 2 + 1,
    MERGED_ROWS,
    MERGED_ROWS + 1,
    2 * MERGED_ROWS + 7,
]
"""Leases saved at once: each new lease is two events (registered, acquired) and one row in
each read model of leases."""


def new_leases(services: Services, count: int, tag: str) -> list[Lease]:
    """`count` leases on new resources, each registered and acquired, not yet saved."""
    now = services.app.clock.now()
    leases = []
    for n in range(count):
        resource = f"{tag}-{n}"
        key = services.app.resource_keys.of("acme", "deploy", resource)
        lease = Lease(key, "acme", "deploy", resource, timestamp=now)
        lease.acquire(
            lease_id=f"lease_{tag}_{n}", holder="agent_a", purpose="p", now=now, ttl_seconds=60
        )
        leases.append(lease)
    return leases


@contextmanager
def statements() -> Iterator[list[str]]:
    """The text of every statement titen's cursors execute meanwhile."""
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def recording(cursor, query, params=None, **kwargs):
        sent.append(query if isinstance(query, str) else query.as_string(cursor))
        return execute(cursor, query, params, **kwargs)

    psycopg.Cursor.execute = recording  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]


@pytest.mark.parametrize("count", SIZES)
def test_a_save_of_many_leases_logs_them_in_order_with_every_read_model_row(database, clock, count):
    services = bootstrap(database, clock, pool_size=3)
    try:
        leases = new_leases(services, count, "many")
        recordings = services.app.save(*leases)
        positions = [recording.notification.id for recording in recordings]
        assert positions == list(range(positions[0], positions[0] + 2 * count))
        logged = services.app.recorder.select_notifications(start=positions[0], limit=2 * count)
        expected = [
            (r.domain_event.originator_id, r.domain_event.originator_version) for r in recordings
        ]
        assert [(n.originator_id, n.originator_version) for n in logged] == expected
        assert len(services.lease_index.rows()) == count
        for name in services.projector.projections:
            assert services.projector.verify(name) is None, name
    finally:
        services.close()


@pytest.mark.parametrize("count", SIZES)
def test_on_postgres_a_save_sends_its_events_and_each_tables_rows_in_few_statements(
    postgres_database, clock, count
):
    services = bootstrap(postgres_database, clock, pool_size=3)
    try:
        leases = new_leases(services, count, "counted")
        with statements() as sent:
            services.app.save(*leases)
    finally:
        services.close()
    inserts = Counter(
        text.split(" VALUES ")[0].split(" SELECT ")[0] for text in sent if text.startswith("INSERT")
    )
    events = [into for into in inserts if "titen_events" in into]
    assert len(events) == 1 and inserts[events[0]] == 1
    values = [text for text in sent if text.startswith(events[0])]
    assert ("unnest(" in values[0]) == (2 * count > VALUES_ROWS)
    read_models = [text for text in sent if "lease_terms" in text]
    assert len(read_models) == math.ceil(count / MERGED_ROWS)
    for text in read_models:
        tables = Counter(re.findall(r'INSERT INTO "\w+"\."(\w+)"', text))
        assert tables == dict.fromkeys(
            [
                "lease_index",
                "event_log",
                "lease_directory",
                "lease_terms",
                "event_parties",
            ],
            1,
        )


@pytest.mark.parametrize("count", SIZES[1:])  # a lone lease's save has under 50 values
def test_on_postgres_psycopg_parses_no_statement_of_a_save_again(
    postgres_database, clock, count, monkeypatch
):
    """psycopg remembers its parse of a statement's `%s` only up to 50 parameters; a save's
    statements of many rows come with their placeholders numbered (storage/numbered.py)."""
    parsed: list[bytes] = []
    parse = psycopg._queries._query2pg_nocache

    def counting(query: bytes, encoding: str):
        parsed.append(query)
        return parse(query, encoding)

    services = bootstrap(postgres_database, clock, pool_size=3)
    try:
        leases = new_leases(services, count, "parsed")
        monkeypatch.setattr(psycopg._queries, "_query2pg_nocache", counting)
        recordings = services.app.save(*leases)
    finally:
        services.close()
    assert len(recordings) == 2 * count
    assert parsed == []
