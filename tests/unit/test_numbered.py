"""storage/numbered.py writes a statement's `%s` placeholders as PostgreSQL's `$n`, in order."""

from __future__ import annotations

from titen.storage.numbered import numbered


def test_each_placeholder_gets_its_number_in_order():
    assert numbered("INSERT INTO t VALUES (%s, %s), (%s, %s)") == (
        "INSERT INTO t VALUES ($1, $2), ($3, $4)"
    )


def test_placeholders_at_either_end_and_side_by_side():
    assert numbered("%s%s x %s") == "$1$2 x $3"


def test_a_statement_without_placeholders_is_unchanged():
    assert (
        numbered('LOCK TABLE "s"."t" IN EXCLUSIVE MODE') == 'LOCK TABLE "s"."t" IN EXCLUSIVE MODE'
    )
