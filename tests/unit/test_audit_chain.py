"""The export's hash chain: an intact file verifies; any altered, removed or moved line is named."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given
from hypothesis import strategies as st

from titen.api.cli.audit_chain import check, seal

HEADER = {"organization": "acme", "since": None, "exported_at": "2026-07-30T10:48:13.829Z"}


def exported(count: int) -> list[str]:
    events = [
        {
            "position": n,
            "time": "2026-07-30T10:48:13.829Z",
            "aggregate": f"{n:032x}",
            "version": 1,
            "type": "lease.acquired",
            "payload": {"holder": f"agent_{n}", "note": "naïve\u2028text"},
        }
        for n in range(1, count + 1)
    ]
    return list(seal(HEADER, events))


def test_an_intact_export_verifies_and_reports_its_head():
    lines = exported(3)
    verdict = check(lines)
    assert verdict.ok and verdict.events == 3
    assert verdict.head == json.loads(lines[-1])["hash"]
    assert [json.loads(line)["record"] for line in lines] == [
        "header",
        "event",
        "event",
        "event",
        "end",
    ]


def test_an_empty_organization_still_has_a_header_and_an_end():
    assert check(exported(0)).ok


def test_an_altered_value_names_its_line():
    lines = exported(3)
    line = json.loads(lines[2])
    line["payload"]["holder"] = "agent_mallory"
    lines[2] = json.dumps(line)
    verdict = check(lines)
    assert (verdict.ok, verdict.bad_line) == (False, 3)
    assert "altered" in verdict.reason


def test_an_alteration_with_its_hash_recomputed_is_caught_by_the_next_line():
    lines = exported(3)
    line = json.loads(lines[2])
    line["payload"]["holder"] = "agent_mallory"
    del line["hash"]
    canonical = json.dumps(line, sort_keys=True, separators=(",", ":"))
    line["hash"] = hashlib.sha256(canonical.encode()).hexdigest()
    lines[2] = json.dumps(line)
    verdict = check(lines)
    assert verdict.bad_line == 4 and "out of place" in verdict.reason


def test_a_whole_rewritten_chain_is_consistent_but_has_another_head():
    original = exported(2)
    forged = list(seal({**HEADER, "organization": "umbra"}, []))
    assert check(forged).ok
    assert check(forged).head != check(original).head


def test_a_removed_line_is_named_by_the_line_that_now_stands_in_its_place():
    lines = exported(3)
    del lines[2]
    verdict = check(lines)
    assert verdict.bad_line == 3 and "out of place" in verdict.reason


def test_removing_the_last_event_breaks_the_end_line():
    lines = exported(3)
    del lines[3]
    assert check(lines).bad_line == 4


def test_a_file_cut_short_is_missing_its_end():
    lines = exported(3)
    verdict = check(lines[:-1])
    assert verdict.bad_line == 5 and "cut short" in verdict.reason
    assert check([]).bad_line == 1


def test_reordered_lines_are_named():
    lines = exported(3)
    lines[1], lines[2] = lines[2], lines[1]
    assert check(lines).bad_line == 2


def test_the_header_cannot_be_replaced_or_dropped():
    lines = exported(2)
    assert check(lines[1:]).bad_line == 1
    assert check(["not json", *lines[1:]]).bad_line == 1


def test_lines_after_the_end_are_refused():
    lines = exported(1)
    assert check([*lines, lines[1]]).bad_line == len(lines) + 1


@given(
    count=st.integers(min_value=1, max_value=6),
    mutation=st.sampled_from(["alter", "remove", "swap", "duplicate"]),
    where=st.integers(min_value=0, max_value=100),
)
def test_any_single_change_is_found_at_the_first_line_that_differs(count, mutation, where):
    lines = exported(count)
    index = where % len(lines)
    changed = list(lines)
    if mutation == "alter":
        line = json.loads(changed[index])
        line["tampered"] = True
        changed[index] = json.dumps(line)
    elif mutation == "remove":
        del changed[index]
    elif mutation == "swap":
        index = min(index, len(lines) - 2)
        changed[index], changed[index + 1] = changed[index + 1], changed[index]
    else:
        changed.insert(index, changed[index])
    first_difference = next(
        (n for n, (a, b) in enumerate(zip(lines, changed, strict=False)) if a != b),
        min(len(lines), len(changed)),
    )
    verdict = check(changed)
    assert not verdict.ok
    assert verdict.bad_line == first_difference + 1
