"""The audit export file: JSON Lines, every line chained to the one before it by a hash.

Line 1 is a header (format, organization, since, exported_at), then one line per event
(position, time, aggregate, version, type, payload), then an end line counting the events.
Every line carries `prev`, the hash of the line before (64 zeros for the first), and `hash`,
the SHA-256 of the line's canonical JSON without `hash`. Altering a line breaks its own hash;
removing, inserting or moving one breaks the `prev` of the line after it; cutting the file
short loses the end line. The last hash (the chain's head) commits to the whole file: record
it elsewhere when exporting, and `verify --head` proves the file is the one exported, not
merely self-consistent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

FORMAT = "titen-audit-export/1"
GENESIS = "0" * 64


@dataclass(frozen=True)
class Verdict:
    """What checking a file found: its event count and head, or the first bad line and why."""

    events: int
    head: str
    bad_line: int | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.bad_line is None


def seal(header: dict[str, Any], events: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The export's lines (without line breaks), each chained to the one before."""
    prev = GENESIS

    def link(record: dict[str, Any]) -> str:
        nonlocal prev
        line = {**record, "prev": prev}
        line["hash"] = prev = _digest(line)
        return _canonical(line)

    yield link({"record": "header", "format": FORMAT, **header})
    count = 0
    for event in events:
        count += 1
        yield link({"record": "event", **event})
    yield link({"record": "end", "events": count})


def check(lines: Iterable[str]) -> Verdict:
    """Recompute the chain; the verdict names the first line that is not as exported."""
    prev, events, number, ended = GENESIS, 0, 0, False
    for number, text in enumerate(lines, start=1):
        problem = _problem(text, number, prev, ended, events)
        if problem:
            return Verdict(events, prev, number, problem)
        line = json.loads(text)
        prev = line["hash"]
        events += line["record"] == "event"
        ended = line["record"] == "end"
    if not ended:
        return Verdict(events, prev, number + 1, "the end line is missing: the file was cut short")
    return Verdict(events, prev)


def _problem(text: str, number: int, prev: str, ended: bool, events: int) -> str:
    try:
        line = json.loads(text)
    except ValueError:
        return "not a JSON line"
    if not isinstance(line, dict) or not isinstance(line.get("hash"), str):
        return "not a line of an audit export (no hash)"
    claimed = line.pop("hash")
    if _digest(line) != claimed:
        return "altered: its hash does not match its content"
    if line.get("prev") != prev:
        return "out of place: it does not follow the line before (one was removed or moved)"
    record = line.get("record")
    if number == 1:
        return "" if record == "header" and line.get("format") == FORMAT else "not a header"
    if ended:
        return "after the end line"
    if record == "end" and line.get("events") != events:
        return f"the end line counts {line.get('events')} events, the file holds {events}"
    return "" if record in ("event", "end") else f"unknown record {record!r}"


def _digest(line: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(line).encode()).hexdigest()


def _canonical(line: dict[str, Any]) -> str:
    """One form per value: sorted keys, no spaces, ASCII only (no Unicode line breaks)."""
    return json.dumps(line, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
