"""Database URLs map onto the event store's configuration in one place."""

import pytest
from psycopg.conninfo import conninfo_to_dict

from titen.storage.database import BadDatabaseURL, parse


def test_sqlite_paths_are_relative_with_three_slashes_and_absolute_with_four():
    assert parse("sqlite:///titen.db").path == "titen.db"
    assert parse("sqlite:////var/lib/titen.db").path == "/var/lib/titen.db"
    assert parse("sqlite:///titen.db").env()["PERSISTENCE_MODULE"] == "eventsourcing.sqlite"


def test_postgres_urls_carry_user_password_host_port_database_and_schema():
    db = parse("postgresql://ops:s%40cret@db.local:6543/titen?schema=prod")
    assert (db.user, db.password, db.hosts, db.dbname, db.schema) == (
        "ops",
        "s@cret",
        (("db.local", 6543),),
        "titen",
        "prod",
    )
    env = db.env(pool_size=7)
    assert (env["POSTGRES_POOL_SIZE"], env["POSTGRES_MAX_OVERFLOW"]) == ("0", "7")
    assert env["POSTGRES_SCHEMA"] == "prod"
    assert parse("postgres://u@h/d").hosts == (("h", 5432),)


def test_a_multi_host_url_is_libpqs_failover_list_with_its_parameters_passed_through():
    db = parse(
        "postgresql://ops:pw@10.0.0.1:5434,[::1],db2:5436/titen"
        "?target_session_attrs=read-write&schema=prod&sslmode=prefer"
    )
    assert db.hosts == (("10.0.0.1", 5434), ("::1", 5432), ("db2", 5436))
    assert db.options == (("sslmode", "prefer"), ("target_session_attrs", "read-write"))
    assert db.schema == "prod"
    env = db.env()
    assert (env["POSTGRES_HOST"], env["POSTGRES_PORT"]) == ("10.0.0.1,::1,db2", "5434,5432,5436")
    assert conninfo_to_dict(env["TITEN_LIBPQ_OPTIONS"]) == dict(db.options)
    info = conninfo_to_dict(db.conninfo())
    assert (info["host"], info["port"]) == ("10.0.0.1,::1,db2", "5434,5432,5436")
    assert info["target_session_attrs"] == "read-write"
    assert "schema" not in info


def test_the_urls_libpq_parameters_win_over_titens_own():
    info = conninfo_to_dict(parse("postgresql://u@h/d?connect_timeout=10").conninfo())
    assert info["connect_timeout"] == "10"


def test_a_parameter_s_value_reaches_libpq_as_written_spaces_and_plus_signs_too():
    """A common one is `options=-c%20statement_timeout%3D5000`: its space once reached libpq as
    a `+`, which libpq does not read as a space in a URL's query."""
    db = parse("postgresql://u@h/d?options=-c%20statement_timeout%3D5000&application_name=a+b")
    assert dict(db.options) == {"options": "-c statement_timeout=5000", "application_name": "a+b"}


def test_logs_never_show_the_password():
    assert "s%40cret" not in parse("postgresql://ops:s%40cret@h:1/d").redacted()
    assert parse("postgresql://ops@h:1/d").redacted() == "postgresql://ops@h:1/d"
    assert (
        parse("postgresql://ops:pw@h1:1,h2:2/d?password=pw2&target_session_attrs=any").redacted()
        == "postgresql://ops:***@h1:1,h2:2/d?password=***&target_session_attrs=any"
    )


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
        "postgresql://u@h1:1,h2:notaport/d",
        "postgresql://u@h1,/d",
        "postgresql://u@h/d?no_such_libpq_parameter=1",
    ],
)
def test_anything_else_is_refused_with_the_forms_that_work(url):
    with pytest.raises(BadDatabaseURL):
        parse(url)
