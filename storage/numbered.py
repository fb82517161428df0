"""Statements with numbered placeholders ($1, $2, ...), as PostgreSQL takes them.

psycopg turns a statement's `%s` placeholders into `$n` in Python, a cost per placeholder, and
remembers the result only for statements of at most 50 parameters and 4,096 bytes. A save that
group commit formed from a batch of commands passes more (19 read-model values and 8 event
values per acquire), so it would pay for the parsing again, under the events table's lock.
Statements titen builds for many rows are numbered here once per shape instead, and executed on
psycopg's RawCursor, which sends a statement as it is.
"""

from __future__ import annotations


def numbered(statement: str) -> str:
    """`statement` with its n-th `%s` written as `$n` (no `%s` may stand for anything else:
    psycopg would have read it as a placeholder too)."""
    pieces = statement.split("%s")
    return "".join(f"{piece}${n}" for n, piece in enumerate(pieces[:-1], 1)) + pieces[-1]
