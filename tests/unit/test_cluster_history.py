"""The history checker itself: a good history passes, and each kind of bad one is caught (so a
cluster test that ends with it can fail)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.cluster.history import Ack, Store, Term, check, violations

T0 = datetime(2026, 7, 30, 10, 0, tzinfo=UTC)


def term(lease: str, token: int, start: int, end: int, released: int | None = None) -> Term:
    return Term(
        "r",
        lease,
        token,
        T0 + timedelta(seconds=start),
        T0 + timedelta(seconds=end),
        None if released is None else T0 + timedelta(seconds=released),
    )


GOOD_TERMS = [term("a", 1, 0, 60, released=5), term("b", 2, 5, 65), term("c", 3, 70, 130)]
GOOD_ACKS = [
    Ack("acquire", "a", 1),
    Ack("release", "a"),
    Ack("acquire", "b", 2),
    Ack("acquire", "c", 3),
    Ack("handoff", "h1"),
]


def store(terms=GOOD_TERMS, handoffs=("h1",), positions=((7, 8, 9), (10,))) -> Store:  # type: ignore[no-untyped-def]
    return Store({"r": list(terms)}, list(handoffs), [list(p) for p in positions])


def test_a_good_history_passes():
    check(GOOD_ACKS, store())
    check(GOOD_ACKS, store(positions=((7, 9, 41), (8,))))  # a sequence's skips (history.py)


@pytest.mark.parametrize(
    ("acks", "bad", "says"),
    [
        (GOOD_ACKS, store(terms=[*GOOD_TERMS[:2], term("c", 3, 30, 90)]), "two holders"),
        (GOOD_ACKS, store(terms=[term("a", 1, 0, 60, released=70), *GOOD_TERMS[1:]]), "two"),
        (GOOD_ACKS, store(terms=[*GOOD_TERMS[:2], term("c", 4, 70, 130)]), "fencing tokens"),
        (GOOD_ACKS, store(terms=[*GOOD_TERMS[:2], term("c", 2, 70, 130)]), "fencing tokens"),
        (GOOD_ACKS, store(terms=GOOD_TERMS[:2]), "the lease has 0 terms"),
        (GOOD_ACKS, store(terms=[*GOOD_TERMS, term("c", 4, 140, 200)]), "has 2 terms"),
        ([Ack("acquire", "b", 5)], store(), "answered token 5"),
        ([Ack("release", "c")], store(), "never ended"),
        (GOOD_ACKS, store(handoffs=()), "created 0 times"),
        (GOOD_ACKS, store(handoffs=("h1", "h1")), "created 2 times"),
        (GOOD_ACKS, store(positions=((7, 9, 8),)), "log position 8 follows 9"),
        (GOOD_ACKS, store(positions=((7, 8, 8, 9),)), "log position 8 follows 8"),
    ],
    ids=[
        "overlapping terms",
        "a release after the next acquire",
        "a token gap",
        "a repeated token",
        "an acknowledged acquire lost",
        "an acknowledged acquire twice",
        "a different token",
        "an acknowledged release lost",
        "an acknowledged handoff lost",
        "a handoff twice",
        "a position going back",
        "a repeated position",
    ],
)
def test_each_kind_of_bad_history_fails(acks, bad, says):
    found = violations(acks, bad)
    assert any(says in line for line in found), found
    with pytest.raises(AssertionError):
        check(acks, bad)
