"""A `titen` command that cannot start says why in one line on stderr and exits non-zero.

No traceback, no "serving on" first: a port in use, a PostgreSQL database, role or password the
server refuses, nothing listening, a SQLite path that cannot be written, a `?schema=` that is
not a plain identifier. And every command says which database it used.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.conftest import skip_or_fail_without_postgres
from tests.support import POSTGRES_URL, TITEN, Server, free_port


def refused(*args: str, database: str) -> str:
    """Run a command expected to be refused; the one line it wrote to stderr."""
    run = subprocess.run(
        [TITEN, *args, "--database", database], capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("titen: ")
    assert "Traceback" not in run.stderr and "serving on" not in run.stderr
    return lines[0]


def postgres_url(user: str | None = None, port: int | None = None, dbname: str | None = None):
    parts = urlsplit(POSTGRES_URL)
    return (
        f"postgresql://{user or parts.username}@{parts.hostname}:{port or parts.port or 5432}"
        f"/{dbname or parts.path.lstrip('/')}"
    )


@pytest.fixture
def postgres() -> None:
    skip_or_fail_without_postgres()


def test_a_missing_postgres_database_is_named(postgres):
    missing = f"titen_missing_{uuid.uuid4().hex[:8]}"
    line = refused("keys", "list", "--org", "acme", database=postgres_url(dbname=missing))
    assert f'database "{missing}" does not exist' in line


def test_a_missing_postgres_role_is_named(postgres):
    role = f"titen_nobody_{uuid.uuid4().hex[:8]}"
    line = refused("serve", "--port", str(free_port()), database=postgres_url(user=role))
    assert f'role "{role}" does not exist' in line


def test_nothing_listening_is_named_at_once(postgres):
    line = refused("serve", "--port", str(free_port()), database=postgres_url(port=free_port()))
    assert "connection refused" in line


@contextmanager
def password_refusing_server() -> Iterator[int]:
    """A PostgreSQL stand-in on a free port that asks for a password and refuses it, as a
    server configured for password authentication does (the test server trusts everyone)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer(conn: socket.socket) -> None:
        with conn:
            while True:
                length = struct.unpack("!I", conn.recv(4, socket.MSG_WAITALL))[0]
                code = struct.unpack("!I", conn.recv(4, socket.MSG_WAITALL))[0]
                conn.recv(length - 8, socket.MSG_WAITALL)
                if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest: not offered
                    conn.sendall(b"N")
                    continue
                break
            conn.sendall(b"R" + struct.pack("!II", 8, 3))  # cleartext password, please
            conn.recv(1024)
            fields = (
                b"SFATAL\0VFATAL\0C28P01\0M" + b'password authentication failed for user "ops"\0\0'
            )
            conn.sendall(b"E" + struct.pack("!I", 4 + len(fields)) + fields)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield port
    finally:
        listener.close()


def test_a_refused_password_is_named():
    with password_refusing_server() as port:
        line = refused(
            "keys", "list", "--org", "a", database=f"postgresql://ops:pw@127.0.0.1:{port}/d"
        )
    assert 'password authentication failed for user "ops"' in line
    assert "postgresql://ops:***@" in line  # the password itself is never shown


def test_a_schema_that_is_not_a_plain_identifier_is_refused_before_touching_postgres(postgres):
    schema = f'x{uuid.uuid4().hex[:6]}";drop'
    line = refused("keys", "list", "--org", "acme", database=f"{POSTGRES_URL}?schema={schema}")
    assert "not a plain identifier" in line
    with psycopg.connect(POSTGRES_URL) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchall()
    assert found == []


def test_a_sqlite_folder_that_does_not_exist_is_named(tmp_path):
    path = tmp_path / "missing" / "titen.db"
    line = refused("serve", "--port", str(free_port()), database=f"sqlite:///{path}")
    assert f"{tmp_path / 'missing'} does not exist" in line
    assert not (tmp_path / "missing").exists()


def test_a_sqlite_path_that_cannot_be_written_is_named(tmp_path):
    if os.geteuid() == 0:  # root writes anywhere it has a file system to write to
        path = "/proc/titen.db"
    else:
        (tmp_path / "locked").mkdir(mode=0o500)
        path = str(tmp_path / "locked" / "titen.db")
    line = refused("keys", "create", "--org", "acme", database=f"sqlite:///{path}")
    assert f"{path}: it cannot be written" in line


def test_a_port_in_use_is_refused_before_serving(database):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        line = refused("serve", "--port", str(port), database=database)
    assert line == f"titen: cannot listen on 127.0.0.1:{port}: the port is already in use"


def test_a_metrics_port_in_use_is_refused_before_serving(database):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        line = refused(
            "serve", "--port", str(free_port()), "--metrics-port", str(port), database=database
        )
    assert f"cannot serve metrics on 127.0.0.1:{port}" in line


def test_every_command_says_which_database_it_used_when_asked(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TITEN_DATABASE_URL"}
    run = subprocess.run(
        [TITEN, "-v", "keys", "create", "--org", "acme"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path / "elsewhere",
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert f"titen: database sqlite:///{tmp_path / 'elsewhere' / 'titen.db'}" in run.stderr
    env["TITEN_DATABASE_URL"] = f"sqlite:///{tmp_path}/named.db"
    listing = subprocess.run(
        [TITEN, "keys", "list", "--org", "acme", "--verbose"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path / "elsewhere",
        env=env,
    )
    assert listing.returncode == 0 and listing.stdout == ""
    assert f"titen: database sqlite:///{tmp_path}/named.db" in listing.stderr


def test_serve_logs_the_absolute_path_of_a_relative_sqlite_database(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    server = Server("sqlite:///relative.db")
    server.stop()
    assert f"sqlite:///{tmp_path / 'relative.db'}" in server.log


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (("--max-subscribers-per-org", "65"), "--max-subscribers-per-org 65 is more than"),
        (
            ("--max-subscribers-per-org", "4", "--max-subscribers-per-principal", "5"),
            "--max-subscribers-per-principal 5 is more than --max-subscribers-per-org 4",
        ),
        (("--max-subscribers", "2", "--max-subscribers-per-org", "3"), "more than"),
    ],
)
def test_subscriber_quotas_above_their_limit_are_refused(tmp_path, options, reason):
    line = refused(
        "serve", "--port", str(free_port()), *options, database=f"sqlite:///{tmp_path}/t.db"
    )
    assert reason in line
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize(
    "option", ["--max-subscribers", "--max-subscribers-per-org", "--max-subscribers-per-principal"]
)
@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_subscriber_limits_must_be_positive_whole_numbers(tmp_path, option, value):
    run = subprocess.run(
        [TITEN, "serve", option, value, "--database", f"sqlite:///{tmp_path}/t.db"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 2 and "is not a whole number of 1 or more" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "t.db").exists()
