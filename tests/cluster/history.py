"""The history check that ends every cluster test: what clients were told against what the
store holds afterwards.

Checked, each failure named:
- never two holders of one resource at one instant: each term of a resource, from its
  `acquired_at` to its end (`released_at`, else `expires_at`, whichever is first), ends before
  the next term of that resource begins;
- fencing tokens per resource are 1, 2, 3, ... in the order of its terms: strictly rising, no
  gap, no repeat;
- every acknowledged write is there exactly once: an acquire answered 201 is one term with the
  token the client was given, a release answered 204 ended that term, a handoff answered 201
  is created once in the log;
- log positions continue: each aggregate's events (a resource's lease, a handoff), taken in the
  order of their versions, which is the order they were committed in, have strictly rising
  positions, none repeated or going back (a promotion that lost or reordered commits breaks
  this). Numerically they skip values: a position is a PostgreSQL sequence's, which an insert that
  rolls back (a lost race) consumes, and which jumps by up to 32 after a crash or a promotion
  (sequences log values ahead). No event is missing for readers all the same: they resume
  after the last position seen, and the checks above find every acknowledged write.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class Term:
    """One lease term as the store's audit shows it."""

    resource: str
    lease_id: str
    fencing_token: int
    acquired_at: datetime
    expires_at: datetime
    released_at: datetime | None

    @property
    def ends_at(self) -> datetime:
        if self.released_at is None:
            return self.expires_at
        return min(self.released_at, self.expires_at)


@dataclass(frozen=True)
class Ack:
    """A write a client was told succeeded: `kind` is acquire, release or handoff."""

    kind: str
    id: str  # the lease_id (acquire, release) or the handoff_id
    fencing_token: int | None = None


@dataclass
class Acks:
    """What clients were told, collected from several threads."""

    items: list[Ack] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ack: Ack) -> None:
        with self._lock:
            self.items.append(ack)


@dataclass(frozen=True)
class Store:
    """What the store holds at the end: every resource's terms in order, the handoffs
    created in the log, and each aggregate's log positions in the order of its versions."""

    terms: dict[str, list[Term]]
    handoffs_created: list[str]
    positions: list[list[int]]


def violations(acks: list[Ack], store: Store) -> list[str]:
    """Every way the history breaks the rules above (empty: it holds)."""
    found: list[str] = []
    by_lease: dict[str, list[Term]] = {}
    for resource, terms in store.terms.items():
        tokens = [term.fencing_token for term in terms]
        if tokens != list(range(1, len(terms) + 1)):
            found.append(f"{resource}: fencing tokens {tokens}, not 1..{len(terms)}")
        by_start = sorted(terms, key=lambda term: term.acquired_at)
        for before, after in itertools.pairwise(by_start):
            if after.acquired_at < before.ends_at:
                found.append(
                    f"{resource}: two holders at {after.acquired_at.isoformat()}: "
                    f"{before.lease_id} (until {before.ends_at.isoformat()}) and {after.lease_id}"
                )
        for term in terms:
            by_lease.setdefault(term.lease_id, []).append(term)
    created = Counter(store.handoffs_created)
    for ack in acks:
        held = by_lease.get(ack.id, [])
        if ack.kind == "handoff":
            if created[ack.id] != 1:
                found.append(f"handoff {ack.id} acknowledged, created {created[ack.id]} times")
        elif len(held) != 1:
            found.append(f"{ack.kind} of {ack.id} acknowledged, the lease has {len(held)} terms")
        elif ack.kind == "acquire" and held[0].fencing_token != ack.fencing_token:
            found.append(
                f"acquire of {ack.id} answered token {ack.fencing_token}, "
                f"the store has {held[0].fencing_token}"
            )
        elif ack.kind == "release" and held[0].released_at is None:
            found.append(f"release of {ack.id} acknowledged, the term never ended")
    for positions in store.positions:
        for before, after in itertools.pairwise(positions):
            if after <= before:
                found.append(f"log position {after} follows {before}")
    return found


def check(acks: list[Ack], store: Store) -> None:
    """Fail, listing every violation, unless the history holds."""
    found = violations(acks, store)
    assert not found, "the history check failed:\n" + "\n".join(found)
