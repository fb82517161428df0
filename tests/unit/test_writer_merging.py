"""A merging Writer (projections/store.py) holds one-row INSERTs and sends them all as one
statement (each table's as a multi-row INSERT, the tables' joined by WITH, its placeholders
numbered), before any other statement and at `flush`, keeping each table's rows in order, and
blames a send the client refuses on the source of the row that fails, while an error the server
answered is raised as it is."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from titen.projections.store import MERGED_ROWS, HeldRowsFailed, Writer
from titen.storage.outages import is_outage

BAD = object()
"""A value the test's cursor refuses, as psycopg refuses one it cannot adapt."""


class Store:
    """What a Writer asks of its store: the statement for a template, and whether an error
    came from the server (here: it carries a SQLSTATE, as PostgreSQL's errors do)."""

    def sql(self, template: str) -> str:
        return template

    def answered_by_server(self, failed: Exception) -> bool:
        return getattr(failed, "sqlstate", None) is not None

    def execute_numbered(self, cursor: Cursor, statement: str, params: list[Any]) -> None:
        cursor.execute(statement, params)


class Cursor:
    def __init__(self, refusing: str = "") -> None:
        self.sent: list[tuple[str, list[Any]]] = []
        self.refusing = refusing

    def execute(self, statement: str, params: Any) -> None:
        if self.refusing and self.refusing in statement:
            raise ValueError(f"refused: {statement}")
        if any(value is BAD for value in params):
            raise TypeError("cannot adapt")
        self.sent.append((statement, list(params)))

    def fetchall(self) -> list[dict[str, Any]]:
        return [{"sent": len(self.sent)}]


def merging() -> tuple[Writer, Cursor]:
    cursor = Cursor()
    return Writer(Store(), cursor, merging=True), cursor  # type: ignore[arg-type]


def test_every_tables_rows_go_as_one_statement_in_order_at_flush():
    writer, cursor = merging()
    writer.execute("INSERT INTO {a} VALUES (%s, %s)", [1, "x"])
    writer.execute("INSERT INTO {b} VALUES (%s)", [2])
    writer.execute("INSERT INTO {a} VALUES (%s, %s)", [3, "y"])
    writer.execute("INSERT INTO {c} VALUES (%s)", [4])
    assert cursor.sent == []
    writer.flush()
    assert cursor.sent == [
        (
            "WITH w0 AS (INSERT INTO {a} VALUES ($1, $2), ($3, $4)),"
            " w1 AS (INSERT INTO {b} VALUES ($5)) INSERT INTO {c} VALUES ($6)",
            [1, "x", 3, "y", 2, 4],
        )
    ]
    writer.flush()
    assert len(cursor.sent) == 1  # nothing held twice


def test_the_same_tables_and_counts_make_one_text_whatever_order_they_came_in():
    """psycopg prepares a connection's 100 most used texts: a batch's order of commands must
    not make more of them."""
    texts = []
    for order in (["{b}", "{a}"], ["{a}", "{b}"]):
        writer, cursor = merging()
        for table in order:
            writer.execute(f"INSERT INTO {table} VALUES (%s)", [table])
        writer.flush()
        texts.append(cursor.sent[0][0])
    assert (
        texts[0]
        == texts[1]
        == "WITH w0 AS (INSERT INTO {a} VALUES ($1)) INSERT INTO {b} VALUES ($2)"
    )


def test_one_tables_rows_go_as_a_plain_insert():
    writer, cursor = merging()
    writer.execute("INSERT INTO {a} VALUES (%s)", [1])
    writer.execute("INSERT INTO {a} VALUES (%s)", [2])
    writer.flush()
    assert cursor.sent == [("INSERT INTO {a} VALUES ($1), ($2)", [1, 2])]


def test_any_other_statement_first_sends_what_is_held():
    writer, cursor = merging()
    writer.execute("INSERT INTO {a} VALUES (%s)", [1])
    writer.execute("DELETE FROM {a} WHERE x = %s", [1])
    writer.execute("INSERT INTO {a} VALUES (%s) ON CONFLICT DO NOTHING", [2])
    writer.execute("INSERT INTO {a} VALUES (%s)", [3])
    writer.flush()
    assert cursor.sent == [
        ("INSERT INTO {a} VALUES ($1)", [1]),
        ("DELETE FROM {a} WHERE x = %s", [1]),
        ("INSERT INTO {a} VALUES (%s) ON CONFLICT DO NOTHING", [2]),
        ("INSERT INTO {a} VALUES ($1)", [3]),
    ]


def test_a_row_whose_values_do_not_match_its_placeholders_is_sent_at_once():
    """Held, it would be joined with the others as numbered values, and a row short of one
    and a row with one too many would shift values into each other's columns unrefused."""
    writer, cursor = merging()
    writer.execute("INSERT INTO {a} VALUES (%s, %s)", [1])
    writer.execute("INSERT INTO {a} VALUES (%s)", [2, 3])
    assert cursor.sent == [
        ("INSERT INTO {a} VALUES (%s, %s)", [1]),
        ("INSERT INTO {a} VALUES (%s)", [2, 3]),
    ]


def test_many_rows_go_in_statements_of_at_most_merged_rows():
    writer, cursor = merging()
    count = 2 * MERGED_ROWS + 3
    for n in range(count):
        writer.execute("INSERT INTO {a} VALUES (%s)", [n])
    writer.flush()
    assert [len(params) for _, params in cursor.sent] == [MERGED_ROWS, MERGED_ROWS, 3]
    assert [value for _, params in cursor.sent for value in params] == list(range(count))
    for statement, params in cursor.sent:  # numbered from $1 in each statement
        assert statement == "INSERT INTO {a} VALUES " + ", ".join(
            f"(${n})" for n in range(1, len(params) + 1)
        )


def test_past_merged_rows_each_statement_carries_each_tables_next_rows():
    writer, cursor = merging()
    for n in range(MERGED_ROWS + 2):
        writer.execute("INSERT INTO {a} VALUES (%s)", [f"a{n}"])
        if n < 3:
            writer.execute("INSERT INTO {b} VALUES (%s)", [f"b{n}"])
    writer.flush()
    first, second = cursor.sent
    assert first[0].startswith("WITH w0 AS (INSERT INTO {a} VALUES ($1), ($2)")
    b = MERGED_ROWS + 1
    assert first[0].endswith(f") INSERT INTO {{b}} VALUES (${b}), (${b + 1}), (${b + 2})")
    assert first[1] == [f"a{n}" for n in range(MERGED_ROWS)] + ["b0", "b1", "b2"]
    assert second == (
        "INSERT INTO {a} VALUES ($1), ($2)",
        [f"a{MERGED_ROWS}", f"a{MERGED_ROWS + 1}"],
    )


def test_a_writer_that_does_not_merge_sends_each_statement_at_once():
    cursor = Cursor()
    writer = Writer(Store(), cursor)  # type: ignore[arg-type]
    writer.execute("INSERT INTO {a} VALUES (%s)", [1])
    assert cursor.sent == [("INSERT INTO {a} VALUES (%s)", [1])]


def test_a_failed_send_of_held_rows_names_the_source_of_its_first_row():
    cursor = Cursor(refusing="{b}")
    writer = Writer(Store(), cursor, merging=True)  # type: ignore[arg-type]
    writer.source = "first"
    writer.execute("INSERT INTO {a} VALUES (%s)", [1])
    writer.source = "second"
    writer.execute("INSERT INTO {b} VALUES (%s)", [2])
    writer.source = "third"
    writer.execute("INSERT INTO {b} VALUES (%s)", [3])
    with pytest.raises(HeldRowsFailed) as raised:
        writer.execute("DELETE FROM {a}")  # sends the held rows first
    assert raised.value.source == "second"
    assert isinstance(raised.value.__cause__, ValueError)
    assert cursor.sent == [("INSERT INTO {a} VALUES (%s)", [1])]


def test_a_fetched_insert_is_sent_at_once_after_what_is_held():
    writer, cursor = merging()
    writer.execute("INSERT INTO {a} VALUES (%s)", [1])
    assert writer.fetchall("INSERT INTO {a} VALUES (%s)", [2]) == [{"sent": 2}]
    assert cursor.sent == [
        ("INSERT INTO {a} VALUES ($1)", [1]),
        ("INSERT INTO {a} VALUES (%s)", [2]),
    ]


def test_a_redirected_writer_starts_after_what_is_held():
    writer, cursor = merging()
    writer.execute("INSERT INTO {a} VALUES (%s)", [1])
    writer.redirected({"a": "scratch_a"}).execute("INSERT INTO {a} VALUES (%s)", [2])
    assert cursor.sent == [
        ("INSERT INTO {a} VALUES ($1)", [1]),
        ("INSERT INTO {scratch_a} VALUES (%s)", [2]),
    ]


def test_the_row_that_cannot_be_sent_is_found_and_blamed():
    writer, cursor = merging()
    for source, value in [("first", 1), ("second", BAD), ("third", 3)]:
        writer.source = source
        writer.execute("INSERT INTO {a} VALUES (%s)", [value])
    with pytest.raises(HeldRowsFailed) as raised:
        writer.flush()
    assert raised.value.source == "second"
    assert isinstance(raised.value.__cause__, TypeError)
    assert cursor.sent == [("INSERT INTO {a} VALUES (%s)", [1])]  # alone, before the bad row


class Refusing(Cursor):
    """A cursor whose every statement fails with `error`."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def execute(self, statement: str, params: Any) -> None:
        raise self.error


def test_an_error_the_server_answered_is_raised_as_it_is():
    refused = psycopg.errors.UniqueViolation("duplicate key")
    writer = Writer(Store(), Refusing(refused), merging=True)  # type: ignore[arg-type]
    writer.source = "mine"
    writer.execute("INSERT INTO {a} VALUES (%s)", [1])
    with pytest.raises(psycopg.errors.UniqueViolation) as raised:
        writer.flush()
    assert raised.value is refused


def test_an_outage_while_sending_held_rows_stays_an_outage():
    lost = psycopg.OperationalError("the connection is lost")
    writer = Writer(Store(), Refusing(lost), merging=True)  # type: ignore[arg-type]
    writer.source = "mine"
    writer.execute("INSERT INTO {a} VALUES (%s)", [1])
    with pytest.raises(HeldRowsFailed) as raised:
        writer.flush()
    assert raised.value.source == "mine"
    assert is_outage(raised.value)
