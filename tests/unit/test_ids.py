"""New public ids are time-ordered UUIDs, so the indexes keyed by them grow at their end."""

from __future__ import annotations

import time
from uuid import UUID, uuid4

from titen.domain.ids import LEASE, new_id, new_uuid, to_uuid


def test_a_new_uuid_is_version_7_of_rfc_9562() -> None:
    made = new_uuid()
    assert made.version == 7
    assert made.variant == "specified in RFC 4122"


def test_its_first_48_bits_are_the_millisecond_it_was_made_in() -> None:
    before = time.time_ns() // 1_000_000
    made = new_uuid()
    after = time.time_ns() // 1_000_000
    assert before <= made.int >> 80 <= after


def test_ids_made_in_later_milliseconds_sort_after_earlier_ones() -> None:
    made = []
    for _ in range(5):
        made.append(new_id(LEASE))
        time.sleep(0.002)
    assert made == sorted(made)


def test_the_rest_is_random() -> None:
    made = [new_uuid() for _ in range(2000)]
    assert len(set(made)) == len(made)
    same_millisecond = [u for u in made if u.int >> 80 == made[0].int >> 80]
    random_parts = {(u.int >> 64 & 0xFFF, u.int & (1 << 62) - 1) for u in same_millisecond}
    assert len(random_parts) == len(same_millisecond)
    before_variant = {u.int >> 64 & 0xFFF for u in made}  # the 12 bits between version and variant
    after_variant = {u.int & 0xFFFF for u in made}  # and the last 16 bits: not a counter's few
    assert len(before_variant) > 1500 and len(after_variant) > 1900


def test_ids_of_earlier_releases_still_read() -> None:
    old = uuid4()
    assert to_uuid(LEASE, LEASE + old.hex) == old
    new = new_id(LEASE)
    assert to_uuid(LEASE, new) == UUID(hex=new.removeprefix(LEASE))
