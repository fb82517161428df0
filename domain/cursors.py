"""The opaque cursor: a position sealed so that clients can neither read, forge nor compare one.

One AES-256 block under a key of the store's (service/store_secret.py), in URL-safe base64: the
position's 8 bytes, a purpose byte (1: a log position, 2: another counter, so neither passes for
the other) and check bytes a changed or made-up cursor fails. Version 4, every cursor of a place
(`after=latest`, an empty page's `next_cursor`, list pages): a fresh 7-byte nonce, in the clear
and as the check bytes, so two cursors of one position differ and asking twice tells nothing of
commits between. Version 3, an event's own `cursor`: zero check bytes, the same on every path
the event is served. Versions 2 (no purpose byte) and 1 (`{"v":1,"after":N}` in the clear, a
log position only up to where the log ended when the secret was made) are still taken.
Reading one back strictly is the REST edge's job (api/rest/paging.py).
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from titen.domain.json_depth import nests_deeper

UNSEALED = 1
SEALED = 2
"""Sealed without a purpose: the previous release's cursors, read back only."""
TAGGED = 3
"""An event's own cursor: deterministic."""
FRESH = 4
"""A cursor of a place: a fresh nonce each time it is made."""
NONCE = 7
LOG, COUNTER = 1, 2
"""Purpose bytes: a log position, or another counter (a resource's audit, the webhook list,
delivery attempts). Neither is 0, so no version 3 block is also a version 2 block."""
MAX_POSITION = 2**63 - 1
"""Positions are signed 64-bit integers in both stores: a cursor beyond is no cursor we made."""
CHECK = bytes(8)


class Cursors:
    """Seals positions into cursors with one store's key, and opens the cursors it made."""

    def __init__(self, key: bytes, unsealed_until: int):
        # One block, so no chaining mode is needed: ECB of a single block is the bare cipher.
        self._cipher = Cipher(algorithms.AES(key), modes.ECB())
        self.unsealed_until = unsealed_until

    def seal(self, position: int, *, of_log: bool = True) -> str:
        """A new cursor of a log position or (`of_log` False) of another counter's, unlike any
        made before for the same position."""
        return self._fresh(position, of_log, secrets.token_bytes(NONCE))

    def _fresh(self, position: int, of_log: bool, nonce: bytes) -> str:
        plain = position.to_bytes(8, "big") + _purpose(of_log) + nonce
        return _text(bytes([FRESH]) + nonce + self._block(plain))

    def seal_event(self, position: int) -> str:
        """The cursor of the event at a log position: the same each time."""
        return self._tagged(position, of_log=True)

    def _tagged(self, position: int, *, of_log: bool) -> str:
        plain = position.to_bytes(8, "big") + _purpose(of_log) + CHECK[1:]
        return _text(bytes([TAGGED]) + self._block(plain))

    def _sealed_untagged(self, position: int) -> str:
        """A version 2 cursor, as the previous release sealed them."""
        return _text(bytes([SEALED]) + self._block(position.to_bytes(8, "big") + CHECK))

    def _block(self, plain: bytes) -> bytes:
        encryptor = self._cipher.encryptor()
        return encryptor.update(plain) + encryptor.finalize()

    def open(self, cursor: str, *, of_log: bool = True) -> int | None:
        """The position a cursor stands for, or None when it is no cursor of this store.

        `of_log`: the cursor stands for a log position. Other counters (webhooks, delivery
        attempts, a resource's audit) are not bounded by the log's end: any version 1 number
        of theirs is taken, unless the log was empty when the store's secret was made (a store
        new since cursors are sealed, which never handed out an unsealed cursor).
        """
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (binascii.Error, ValueError):
            return None
        version = _version(raw)
        if version == FRESH:
            nonce = raw[1 : 1 + NONCE]
            position = self._opened(raw[1 + NONCE :], _purpose(of_log) + nonce)
        elif version == TAGGED:
            position = self._opened(raw[1:], _purpose(of_log) + CHECK[1:])
        elif version == SEALED:
            position = self._opened(raw[1:], CHECK)
        else:
            position = _unsealed(raw)
            if position is not None and position > self._unsealed_limit(of_log):
                return None
        if position is None or not 0 <= position <= MAX_POSITION:
            return None
        if version == FRESH:
            spelled = self._fresh(position, of_log, raw[1 : 1 + NONCE])
        elif version == TAGGED:
            spelled = self._tagged(position, of_log=of_log)
        elif version == SEALED:
            spelled = self._sealed_untagged(position)
        else:
            spelled = unsealed_cursor(position)
        return position if spelled == cursor else None  # one spelling per cursor

    def _unsealed_limit(self, of_log: bool) -> int:
        """The largest version 1 cursor taken (0, the start, tells nothing and always is)."""
        if of_log or self.unsealed_until == 0:
            return self.unsealed_until
        return MAX_POSITION

    def _opened(self, block: bytes, check: bytes) -> int | None:
        """The position in a sealed block whose bytes after the position are `check`, else
        None."""
        decryptor = self._cipher.decryptor()
        plain = decryptor.update(block) + decryptor.finalize()
        if plain[8:] != check:
            return None
        return int.from_bytes(plain[:8], "big")


def _version(raw: bytes) -> int:
    """Which version a decoded cursor claims to be, by its length and first byte."""
    if len(raw) == 1 + NONCE + 16 and raw[0] == FRESH:
        return FRESH
    if len(raw) == 17 and raw[0] in (SEALED, TAGGED):
        return raw[0]
    return UNSEALED


def _purpose(of_log: bool) -> bytes:
    return bytes([LOG if of_log else COUNTER])


def unsealed_cursor(position: int) -> str:
    """A version 1 cursor, as earlier releases made them (for reading them back, and tests)."""
    raw = json.dumps({"v": UNSEALED, "after": position}, separators=(",", ":"))
    return _text(raw.encode())


def _unsealed(raw: bytes) -> int | None:
    if nests_deeper(raw, 1):  # a version 1 cursor is one object
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: not expected, measured first
        return None
    if not isinstance(value, dict) or set(value) != {"v", "after"}:
        return None
    after = value["after"]
    if value["v"] != UNSEALED or type(after) is not int:
        return None
    return after


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")
