"""A merging Writer (projections/store.py) holds one-row INSERTs and sends each table's as
multi-row INSERTs, before any other statement and at `flush`, keeping each table's rows in order,
and blames a failed send on the source of its first row."""

from __future__ import annotations

from typing import Any

import pytest

from titen.projections.store import MERGED_ROWS, HeldRowsFailed, Writer


class Store:
    """What a Writer asks of its store: the statement for a template."""

    def sql(self, template: str) -> str:
        return template


class Cursor:
    def __init__(self, refusing: str = "") -> None:
        self.sent: list[tuple[str, list[Any]]] = []
        self.refusing = refusing

    def execute(self, statement: str, params: Any) -> None:
        if self.refusing and self.refusing in statement:
            raise ValueError(f"refused: {statement}")
        self.sent.append((statement, list(params)))

    def fetchall(self) -> list[dict[str, Any]]:
        return [{"sent": len(self.sent)}]


def merging() -> tuple[Writer, Cursor]:
    cursor = Cursor()
    return Writer(Store(), cursor, merging=True), cursor  # type: ignore[arg-type]


def test_each_tables_rows_go_as_one_insert_in_order_at_flush():
    writer, cursor = merging()
    writer.execute("INSERT INTO {a} VALUES (%s, %s)", [1, "x"])
    writer.execute("INSERT INTO {b} VALUES (%s)", [2])
    writer.execute("INSERT INTO {a} VALUES (%s, %s)", [3, "y"])
    assert cursor.sent == []
    writer.flush()
    assert cursor.sent == [
        ("INSERT INTO {a} VALUES (%s, %s), (%s, %s)", [1, "x", 3, "y"]),
        ("INSERT INTO {b} VALUES (%s)", [2]),
    ]
    writer.flush()
    assert len(cursor.sent) == 2  # nothing held twice


def test_any_other_statement_first_sends_what_is_held():
    writer, cursor = merging()
    writer.execute("INSERT INTO {a} VALUES (%s)", [1])
    writer.execute("DELETE FROM {a} WHERE x = %s", [1])
    writer.execute("INSERT INTO {a} VALUES (%s) ON CONFLICT DO NOTHING", [2])
    writer.execute("INSERT INTO {a} VALUES (%s)", [3])
    writer.flush()
    assert cursor.sent == [
        ("INSERT INTO {a} VALUES (%s)", [1]),
        ("DELETE FROM {a} WHERE x = %s", [1]),
        ("INSERT INTO {a} VALUES (%s) ON CONFLICT DO NOTHING", [2]),
        ("INSERT INTO {a} VALUES (%s)", [3]),
    ]


def test_many_rows_go_in_statements_of_at_most_merged_rows():
    writer, cursor = merging()
    count = 2 * MERGED_ROWS + 3
    for n in range(count):
        writer.execute("INSERT INTO {a} VALUES (%s)", [n])
    writer.flush()
    assert [len(params) for _, params in cursor.sent] == [MERGED_ROWS, MERGED_ROWS, 3]
    assert [value for _, params in cursor.sent for value in params] == list(range(count))
    assert all(statement.count("(%s)") == len(params) for statement, params in cursor.sent)


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
        ("INSERT INTO {a} VALUES (%s)", [1]),
        ("INSERT INTO {a} VALUES (%s)", [2]),
    ]


def test_a_redirected_writer_starts_after_what_is_held():
    writer, cursor = merging()
    writer.execute("INSERT INTO {a} VALUES (%s)", [1])
    writer.redirected({"a": "scratch_a"}).execute("INSERT INTO {a} VALUES (%s)", [2])
    assert cursor.sent == [
        ("INSERT INTO {a} VALUES (%s)", [1]),
        ("INSERT INTO {scratch_a} VALUES (%s)", [2]),
    ]
