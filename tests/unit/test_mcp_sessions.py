"""MCP session ids: recognized for the key they were issued to, by any holder of the store's key,
and for no other key or store."""

from __future__ import annotations

import re

from titen.domain.mcp_sessions import SessionIds

STORE_KEY = bytes(range(32))


def test_an_id_belongs_to_its_key_for_every_process_of_the_store():
    issued = SessionIds(STORE_KEY).issue("hash-of-key-a")
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", issued)  # visible ASCII, as the protocol asks
    assert SessionIds(STORE_KEY).belongs(issued, "hash-of-key-a")  # another process, same store
    assert not SessionIds(STORE_KEY).belongs(issued, "hash-of-key-b")
    assert not SessionIds(bytes(32)).belongs(issued, "hash-of-key-a")  # another store


def test_ids_are_fresh_and_made_up_or_changed_ones_belong_to_nobody():
    sessions = SessionIds(STORE_KEY)
    issued = sessions.issue("k")
    assert issued != sessions.issue("k")
    flipped = issued[:-1] + ("A" if issued[-1] != "A" else "B")  # maybe only unused bits
    spellings = (flipped, issued + "=", issued[:5] + "!" + issued[5:], issued[:-2], issued + "AAAA")
    for session_id in (*spellings, "", "not base64 !", "é" * 43):
        assert not sessions.belongs(session_id, "k"), session_id
