"""Cursors: opaque, round-tripping, and strict about anything they did not produce."""

from __future__ import annotations

import base64
import json

import falcon
import pytest
from hypothesis import given
from hypothesis import strategies as st

from titen.api.rest.paging import decode_cursor, encode_cursor


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_a_cursor_round_trips(position):
    cursor = encode_cursor(position)
    assert cursor.isascii() and "=" not in cursor
    assert decode_cursor(cursor) == position


def forged(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "not base64!",
        forged([1]),
        forged({"v": 1, "after": -1}),
        forged({"v": 1, "after": 1.0}),
        forged({"v": 1, "after": True}),
        forged({"v": 1, "after": "1"}),
        forged({"v": 2, "after": 1}),
        forged({"v": 1, "after": 1, "x": 0}),
        forged({"after": 1}),
        forged({"v": 1, "after": 1}),  # spaces after separators: not the canonical form
        encode_cursor(7) + "==",
    ],
)
def test_anything_else_is_a_400(cursor):
    with pytest.raises(falcon.HTTPError) as raised:
        decode_cursor(cursor)
    assert raised.value.status_code == 400
