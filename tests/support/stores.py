"""Test databases: a PostgreSQL schema of its own, and copies of the stores earlier releases
wrote (tests/fixtures)."""

from __future__ import annotations

import json as jsonlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

POSTGRES_URL = os.environ.get(
    "TITEN_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
FIXTURES = Path(__file__).parent.parent / "fixtures"
RELEASE_SCHEMAS = {
    # fixture (its folder and its files' stem): the schema its PostgreSQL dump names
    "previous_release": "titen_fixture_prev",  # before the `titen` namespace
    "before_inline": "titen_fixture_before_inline",  # before inline read models (b3ba8ee)
    "two_lease_tables": "titen_fixture_two_lease_tables",  # lease_index and lease_listing (354eb8a)
}


def postgres_reason() -> str | None:
    """Why PostgreSQL cannot be used here, or None when it can."""
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL unreachable at {POSTGRES_URL}: {exc}".strip()


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A database URL on a fresh schema of the test database, dropped afterwards."""
    schema = f"titen_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{POSTGRES_URL}?schema={schema}"
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def previous_release_store(backend: str, release: str = "previous_release") -> Iterator[str]:
    """A database URL on a fresh copy of the store an earlier release wrote (`backend` is
    "sqlite" or "postgres", `release` a key of RELEASE_SCHEMAS); what it holds is
    `previous_release_manifest(backend, release)`.

    The fixture itself is never opened: tests change what they open. The PostgreSQL dump names
    its schema in identifiers and inside a function body, so the copy replaces the name in the
    text (fixtures/previous_release/README.md) and runs it without psql's meta-commands.
    """
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            copy = shutil.copy(FIXTURES / release / f"{release}.db", directory)
            yield f"sqlite:///{copy}"
        return
    schema = f"titen_test_{uuid.uuid4().hex[:12]}"
    text = (FIXTURES / release / f"{release}.pg.sql").read_text()
    script = "\n".join(
        line
        for line in text.replace(RELEASE_SCHEMAS[release], schema).splitlines()
        if not line.startswith("\\")
    )
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(script)  # one script: the data are INSERT statements, not COPY
    try:
        yield f"{POSTGRES_URL}?schema={schema}"
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def previous_release_manifest(backend: str, release: str = "previous_release") -> dict:
    """What `previous_release_store(backend, release)` holds and how that release answered."""
    return jsonlib.loads((FIXTURES / release / f"manifest.{backend}.json").read_text())
