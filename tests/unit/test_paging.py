"""Cursors: sealed, round-tripping, and strict about anything they did not produce."""

from __future__ import annotations

import base64
import json

import falcon
import falcon.testing
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given
from hypothesis import strategies as st

from titen.api.rest.paging import decode_cursor, encode_cursor
from titen.domain.cursors import Cursors, unsealed_cursor

CURSORS = Cursors(bytes(range(32)), unsealed_until=1000)
FRESH_7 = CURSORS._fresh(7, True, b"nonce07")
"""A fresh cursor of position 7 with a fixed nonce: the same in every test process."""


def request() -> falcon.Request:
    req = falcon.testing.create_req()
    req.context.cursors = CURSORS
    return req


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_a_cursor_round_trips(position):
    cursor = encode_cursor(request(), position)
    assert cursor.isascii() and "=" not in cursor and len(cursor) == 32
    assert decode_cursor(request(), cursor) == position
    event = CURSORS.seal_event(position)
    assert len(event) == 23 and decode_cursor(request(), event) == position


@given(st.integers(min_value=0, max_value=2**63 - 2))
def test_a_cursor_does_not_hold_its_position_in_the_clear(position):
    cursor, following = CURSORS.seal(position), CURSORS.seal(position + 1)
    raw = base64.urlsafe_b64decode(cursor + "=")
    assert position.to_bytes(8, "big") not in raw and b"after" not in raw
    assert cursor[:8] != following[:8]  # neighbours share nothing that would order them


def test_two_cursors_of_one_position_differ_and_both_open():
    made = {CURSORS.seal(42) for _ in range(100)}
    assert len(made) == 100
    assert {Cursors(bytes(range(32)), 0).open(cursor) for cursor in made} == {42}
    assert CURSORS.open(CURSORS.seal(42), of_log=False) is None  # a log cursor is no counter's
    assert CURSORS.open(CURSORS.seal(42, of_log=False), of_log=False) == 42


def test_an_events_cursor_is_the_same_for_the_same_position_and_key_only():
    assert CURSORS.seal_event(42) == Cursors(bytes(range(32)), 0).seal_event(42)
    other = Cursors(bytes(32), unsealed_until=1000)
    assert other.seal_event(42) != CURSORS.seal_event(42)
    for cursor in (CURSORS.seal_event(42), CURSORS.seal(42)):
        assert other.open(cursor) is None  # another store's cursor is none of ours


def test_a_fresh_cursor_with_its_nonce_changed_is_refused():
    raw = bytearray(base64.urlsafe_b64decode(CURSORS.seal(42) + "===="))
    for index in (1, 7, 8, 23):
        changed = bytearray(raw)
        changed[index] ^= 1
        text = base64.urlsafe_b64encode(bytes(changed)).decode().rstrip("=")
        assert CURSORS.open(text) is None


def test_an_unsealed_cursor_of_an_earlier_release_is_read_up_to_where_the_log_was():
    assert decode_cursor(request(), unsealed_cursor(0)) == 0
    assert decode_cursor(request(), unsealed_cursor(1000)) == 1000
    with pytest.raises(falcon.HTTPError):
        decode_cursor(request(), unsealed_cursor(1001))  # never handed out unsealed
    # A count other than the log's (webhooks, deliveries) has no such bound.
    assert decode_cursor(request(), unsealed_cursor(5000), of_log=False) == 5000


def forged(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def flipped(cursor: str, index: int) -> str:
    raw = bytearray(base64.urlsafe_b64decode(cursor + "="))
    raw[index] ^= 1
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


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
        unsealed_cursor(7) + "==",
        CURSORS.seal_event(7) + "=",
        CURSORS.seal_event(7)[:-1],
        flipped(CURSORS.seal_event(7), 0),  # another version
        flipped(CURSORS.seal_event(7), 16),  # a changed block
        FRESH_7 + "=",
        FRESH_7[:-1],
        flipped(FRESH_7, 0),
        flipped(FRESH_7, 3),  # a changed nonce
        flipped(FRESH_7, 20),  # a changed block
        base64.urlsafe_b64encode(bytes([2]) + bytes(16)).decode().rstrip("="),
        unsealed_cursor(2**63),
    ],
)
def test_anything_else_is_a_400(cursor):
    with pytest.raises(falcon.HTTPError) as raised:
        decode_cursor(request(), cursor)
    assert raised.value.status_code == 400
    assert CURSORS.open(cursor, of_log=False) is None


def test_a_counters_cursor_is_no_log_cursor_and_a_log_cursor_no_counters():
    """Sealed apart: an audit (or webhook list) cursor given as the event log's `after` would
    read the log from a number the caller never saw there."""
    counter, log = encode_cursor(request(), 7, of_log=False), encode_cursor(request(), 7)
    assert counter != log
    assert decode_cursor(request(), counter, of_log=False) == 7
    assert decode_cursor(request(), log) == 7
    for cursor, of_log in ((counter, True), (log, False)):
        with pytest.raises(falcon.HTTPError) as raised:
            decode_cursor(request(), cursor, of_log=of_log)
        assert raised.value.status_code == 400


def previous_release_cursor(position: int) -> str:
    """A cursor as the previous release sealed it: version 2, the position and 8 zero bytes."""
    encryptor = Cipher(algorithms.AES(bytes(range(32))), modes.ECB()).encryptor()
    block = encryptor.update(position.to_bytes(8, "big") + bytes(8)) + encryptor.finalize()
    return base64.urlsafe_b64encode(bytes([2]) + block).decode().rstrip("=")


def test_a_sealed_cursor_of_the_previous_release_still_opens_where_it_did():
    old = previous_release_cursor(5000)
    assert CURSORS.open(old) == 5000  # a log position
    assert CURSORS.open(old, of_log=False) == 5000  # a counter's (an audit page's)
