"""Database URLs map onto the event store's configuration in one place."""

import pytest

from titen.storage.database import BadDatabaseURL, parse


def test_sqlite_paths_are_relative_with_three_slashes_and_absolute_with_four():
    assert parse("sqlite:///titen.db").path == "titen.db"
    assert parse("sqlite:////var/lib/titen.db").path == "/var/lib/titen.db"
    assert parse("sqlite:///titen.db").env()["PERSISTENCE_MODULE"] == "eventsourcing.sqlite"


def test_postgres_urls_carry_user_password_host_port_database_and_schema():
    db = parse("postgresql://ops:s%40cret@db.local:6543/titen?schema=prod")
    assert (db.user, db.password, db.host, db.port, db.dbname, db.schema) == (
        "ops",
        "s@cret",
        "db.local",
        6543,
        "titen",
        "prod",
    )
    env = db.env(pool_size=7)
    assert (env["POSTGRES_POOL_SIZE"], env["POSTGRES_MAX_OVERFLOW"]) == ("0", "7")
    assert env["POSTGRES_SCHEMA"] == "prod"
    assert parse("postgres://u@h/d").port == 5432


def test_logs_never_show_the_password():
    assert "s%40cret" not in parse("postgresql://ops:s%40cret@h:1/d").redacted()
    assert parse("postgresql://ops@h:1/d").redacted() == "postgresql://ops@h:1/d"


@pytest.mark.parametrize(
    "url",
    [
        "",
        "sqlite:///",
        "mysql://u@h/d",
        "postgresql://h/d",
        "postgresql://u@h/",
        "postgresql://u@h:notaport/d",
        "postgresql://u@h:99999/d",
        "postgresql://u@[::1/d",
    ],
)
def test_anything_else_is_refused_with_the_forms_that_work(url):
    with pytest.raises(BadDatabaseURL):
        parse(url)
