"""A plain in-memory model of the lease and handoff spec, to check the service against.

No events, no storage, no HTTP: dictionaries and the rules as the spec states them. The
property-based test (test_model.py) runs the same random commands against this and the service
and requires the same answers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

Resource = tuple[str, str]


@dataclass(frozen=True)
class Principal:
    organization: str
    name: str
    operator: bool = False


@dataclass
class Term:
    lease_id: str
    organization: str
    resource: Resource
    holder: str
    purpose: str
    acquired_at: datetime
    expires_at: datetime
    ttl_seconds: int
    fencing_token: int
    released_at: datetime | None = None
    released_by: str | None = None
    ended: str | None = None


@dataclass
class Handoff:
    handoff_id: str
    organization: str
    from_principal: str
    to_principal: str
    subject_id: str
    message: str | None
    created_at: datetime
    status: str = "pending"
    resolved_at: datetime | None = None


class Model:
    def __init__(self, principals: list[Principal], now: datetime):
        self.principals = principals
        self.now = now
        self.terms: dict[tuple[str, Resource], list[Term]] = {}
        self.leases: dict[str, Term] = {}
        self.handoffs: dict[str, Handoff] = {}  # in creation order

    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    # Leases

    def current(self, organization: str, resource: Resource) -> Term | None:
        terms = self.terms.get((organization, resource), [])
        return terms[-1] if terms and terms[-1].ended is None else None

    def blocker(self, who: Principal, resource: Resource) -> Term | None:
        """The term that refuses this acquire: another holder's, not yet expired."""
        current = self.current(who.organization, resource)
        if current and current.holder != who.name and self.now < current.expires_at:
            return current
        return None

    def acquire(
        self, who: Principal, resource: Resource, purpose: str, ttl: int, lease_id: str
    ) -> Term:
        """Record a granted acquire (check `blocker` first), ending the current term if any."""
        terms = self.terms.setdefault((who.organization, resource), [])
        current = self.current(who.organization, resource)
        if current is not None:
            expired = self.now >= current.expires_at
            current.ended = "replaced_after_expiry" if expired else "superseded"
            current.released_at, current.released_by = self.now, who.name
        term = Term(
            lease_id=lease_id,
            organization=who.organization,
            resource=resource,
            holder=who.name,
            purpose=purpose,
            acquired_at=self.now,
            expires_at=self.now + timedelta(seconds=ttl),
            ttl_seconds=ttl,
            fencing_token=len(terms) + 1,
        )
        terms.append(term)
        self.leases[lease_id] = term
        return term

    def release(self, who: Principal, lease_id: str) -> Term | None:
        """The released term, or None where the service answers 404."""
        term = self.leases.get(lease_id)
        if term is None or term.ended is not None or term.organization != who.organization:
            return None
        if term.holder != who.name and not who.operator:
            return None
        term.ended = "released" if term.holder == who.name else "released_by_operator"
        term.released_at, term.released_by = self.now, who.name
        return term

    def visible_lease(self, who: Principal, lease_id: str) -> Term | None:
        """The lease GET /v1/leases/{id} shows `who`: unended, and its own or its operator's."""
        term = self.leases.get(lease_id)
        if term is None or term.ended is not None or term.organization != who.organization:
            return None
        return term if term.holder == who.name or who.operator else None

    def unreleased(self) -> list[Term]:
        return [term for term in self.leases.values() if term.ended is None]

    def history(self, organization: str, resource: Resource, as_of: datetime | None) -> list[Term]:
        """The terms on a resource as they stood at `as_of`."""
        terms = self.terms.get((organization, resource), [])
        return [as_of_then(term, as_of) for term in terms if seen(term.acquired_at, as_of)]

    # Handoffs

    def refusal(self, who: Principal, to_principal: str) -> str | None:
        """Why a handoff to `to_principal` is refused (a 400 message), or None."""
        if to_principal == who.name:
            return "to_principal must not be the caller."
        if not any(
            p.organization == who.organization and p.name == to_principal for p in self.principals
        ):
            return "to_principal is not a principal of this organization."
        return None

    def create(self, who: Principal, to: str, subject: str, message: str | None, handoff_id: str):
        self.handoffs[handoff_id] = Handoff(
            handoff_id, who.organization, who.name, to, subject, message, self.now
        )

    def resolve(self, who: Principal, handoff_id: str, accept: bool) -> int:
        """The status the service answers; on 200 the handoff is resolved."""
        handoff = self.handoffs.get(handoff_id)
        if handoff is None or handoff.organization != who.organization:
            return 404
        if handoff.status != "pending" or who.name not in (
            handoff.from_principal,
            handoff.to_principal,
        ):
            return 404  # a bystander learns nothing, as GET answers them
        if handoff.to_principal != who.name:
            return 400
        handoff.status = "accepted" if accept else "rejected"
        handoff.resolved_at = self.now
        return 200

    def visible(self, who: Principal, handoff_id: str) -> Handoff | None:
        handoff = self.handoffs.get(handoff_id)
        if handoff is None or handoff.organization != who.organization:
            return None
        return handoff if who.name in (handoff.from_principal, handoff.to_principal) else None

    def inbox(self, who: Principal) -> list[Handoff]:
        return [
            h
            for h in self.handoffs.values()
            if h.status == "pending"
            and h.organization == who.organization
            and h.to_principal == who.name
        ]

    def pending(self) -> list[Handoff]:
        return [h for h in self.handoffs.values() if h.status == "pending"]


def seen(instant: datetime | None, as_of: datetime | None) -> bool:
    return instant is not None and (as_of is None or instant <= as_of)


def as_of_then(term: Term, as_of: datetime | None) -> Term:
    """A term as it stood at `as_of`: an ending after that had not happened yet."""
    if seen(term.released_at, as_of):
        return term
    return replace(term, released_at=None, released_by=None, ended=None)
