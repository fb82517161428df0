"""The opaque cursor: a position sealed so that clients can neither read nor forge one.

One encoding for every place that hands a position out: list pages, the event log's `cursor`
and `next_cursor`, and the CloudEvents that webhooks and the relay deliver. Reading one back
strictly is the REST edge's job (api/rest/paging.py).

Version 2, made since cursors are sealed: a version byte, then the position's 8 bytes and 8 zero
check bytes encrypted as one AES-256 block under a key of the store's (service/store_secret.py),
in URL-safe base64 (23 characters). The log position is global, so in the clear (version 1) it
let one organization count every organization's events between two of its own; sealed, a cursor
says nothing of the position, not even how far apart two are. A changed or made-up cursor
decrypts to check bytes that are not zero (one chance in 2^64 of passing), so it is refused. One
block under a fixed key is deterministic: the same position always gives the same cursor, on any
process of the store and after restarts, which is what a client resuming from a cursor needs.

Version 1, made by earlier releases (URL-safe base64 of `{"v":1,"after":N}`), is still accepted,
since clients hold them, but a log position only up to where the log ended when the store's
secret was made: every cursor of the log handed out in the clear was at most that, and anything
beyond would let a client probe positions it was never given.
"""

from __future__ import annotations

import base64
import binascii
import json

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

UNSEALED = 1
SEALED = 2
MAX_POSITION = 2**63 - 1
"""Positions are signed 64-bit integers in both stores: a cursor beyond is no cursor we made."""
CHECK = bytes(8)


class Cursors:
    """Seals positions into cursors with one store's key, and opens the cursors it made."""

    def __init__(self, key: bytes, unsealed_until: int):
        # One block, so no chaining mode is needed: ECB of a single block is the bare cipher.
        self._cipher = Cipher(algorithms.AES(key), modes.ECB())
        self.unsealed_until = unsealed_until

    def seal(self, position: int) -> str:
        encryptor = self._cipher.encryptor()
        block = encryptor.update(position.to_bytes(8, "big") + CHECK) + encryptor.finalize()
        return _text(bytes([SEALED]) + block)

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
        sealed = len(raw) == 17 and raw[0] == SEALED
        if sealed:
            position = self._opened(raw[1:])
        else:
            position = _unsealed(raw)
            if position is not None and position > self._unsealed_limit(of_log):
                return None
        if position is None or not 0 <= position <= MAX_POSITION:
            return None
        made = self.seal(position) if sealed else unsealed_cursor(position)
        return position if made == cursor else None  # one spelling per cursor

    def _unsealed_limit(self, of_log: bool) -> int:
        """The largest version 1 cursor taken (0, the start, tells nothing and always is)."""
        if of_log or self.unsealed_until == 0:
            return self.unsealed_until
        return MAX_POSITION

    def _opened(self, block: bytes) -> int | None:
        decryptor = self._cipher.decryptor()
        plain = decryptor.update(block) + decryptor.finalize()
        if plain[8:] != CHECK:
            return None
        return int.from_bytes(plain[:8], "big")


def unsealed_cursor(position: int) -> str:
    """A version 1 cursor, as earlier releases made them (for reading them back, and tests)."""
    raw = json.dumps({"v": UNSEALED, "after": position}, separators=(",", ":"))
    return _text(raw.encode())


def _unsealed(raw: bytes) -> int | None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: JSON nested deep
        return None
    if not isinstance(value, dict) or set(value) != {"v", "after"}:
        return None
    after = value["after"]
    if value["v"] != UNSEALED or type(after) is not int:
        return None
    return after


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")
