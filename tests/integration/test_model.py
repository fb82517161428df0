"""The service against a plain model of the spec, over random sequences of commands.

A hypothesis `RuleBasedStateMachine` acquires, re-acquires, releases, lets leases expire, hands
off, resolves, and tries all of it as the wrong principal, across several principals in two
organizations that share principal and resource names. Every command goes through the HTTP API
(falcon's TestClient, with a FakeClock) and through `spec_model.Model`; after each step the
answers must be equal, and so must the projections and the model. At the end of each run every
projection must equal a fresh rebuild from the log.

SQLite runs enough examples to matter; PostgreSQL fewer (each example is a fresh schema).
"""

from __future__ import annotations

import re
import tempfile
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from tests.conftest import skip_or_fail_without_postgres
from tests.integration.spec_model import Handoff, Model, Principal, Term
from tests.support import FakeClock, bearer, postgres_schema
from titen.api.rest.app import create_app
from titen.domain.clock import iso
from titen.service.bootstrap import bootstrap

PRINCIPALS = [
    Principal("acme", "agent_a"),
    Principal("acme", "agent_b"),
    Principal("acme", "agent_c"),
    Principal("acme", "ops", operator=True),
    Principal("umbra", "agent_a"),  # the same name in another organization
    Principal("umbra", "ops", operator=True),
]
TARGETS = sorted({p.name for p in PRINCIPALS} | {"agent_nobody"})
RESOURCES = [("deploy", "checkout"), ("deploy", "search"), ("db", "checkout")]
AUDIT_PAGE = 2
"""Terms per audit page: small, so that a resource's audit walks its pages."""
UNKNOWN_LEASE = "lease_" + "0" * 32
UNKNOWN_HANDOFF = "hoff_" + "0" * 32
LEASE_ID = re.compile(r"lease_[0-9a-f]{32}")
HANDOFF_ID = re.compile(r"hoff_[0-9a-f]{32}")
ENDING_TYPES = {
    "released": "lease.released",
    "released_by_operator": "lease.released",
    "superseded": "lease.superseded",
    "replaced_after_expiry": "lease.replaced_after_expiry",
}
EXAMPLES = {"sqlite": 200, "postgres": 26}
# Examples in independent runs, so that `make test`'s processes share them out.
SHARDS = {"sqlite": 4, "postgres": 2}
STEPS = {"sqlite": 40, "postgres": 30}

principals = st.sampled_from(PRINCIPALS)
operators = st.sampled_from([p for p in PRINCIPALS if p.operator])
agents = st.sampled_from([p for p in PRINCIPALS if not p.operator])
subjects = st.sampled_from(["user_rama", "ticket_7"])
messages = st.sampled_from([None, "over to you"])
ttls = st.sampled_from([10, 60, 600])
picks = st.integers(min_value=0, max_value=1000)
resources = st.sampled_from(RESOURCES)
as_of_seconds_ago = st.sampled_from([None, 0, 1, 10, 60, 600, 100_000])


class Spec(RuleBasedStateMachine):
    """One example: a fresh database, a fresh model, the same commands to both."""

    backend = "sqlite"
    leases = Bundle("leases")
    handoffs = Bundle("handoffs")

    def __init__(self) -> None:
        super().__init__()
        self.stack = ExitStack()
        if self.backend == "sqlite":
            folder = self.stack.enter_context(tempfile.TemporaryDirectory())
            url = f"sqlite:///{Path(folder) / 'titen.db'}"
        else:
            url = self.stack.enter_context(postgres_schema())
        self.clock = FakeClock()
        self.services = bootstrap(url, self.clock, pool_size=4)
        self.stack.callback(self.services.close)
        self.client = falcon.testing.TestClient(create_app(self.services))
        self.keys = {
            p: self.services.keys.create(p.organization, p.name, _role(p)) for p in PRINCIPALS
        }
        self.model = Model(PRINCIPALS, self.clock.now())

    def teardown(self) -> None:
        try:
            self.every_history_equals_the_model()
            projector = self.services.projector
            for name in projector.projections:
                assert projector.verify(name) is None, name
            live = (self.services.lease_index.rows(), self.services.inbox.rows())
            projector.rebuild("lease_index")
            projector.rebuild("handoff_inbox")
            assert (self.services.lease_index.rows(), self.services.inbox.rows()) == live
        finally:
            self.stack.close()

    def call(self, who: Principal, method: str, path: str, **kwargs: Any) -> Any:
        return self.client.simulate_request(method, path, headers=bearer(self.keys[who]), **kwargs)

    # Time

    @rule(seconds=st.sampled_from([1, 9, 10, 59, 60, 61, 600, 601]))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)
        self.model.advance(seconds)

    # Leases

    @rule(
        target=leases,
        who=principals,
        resource=resources,
        ttl=ttls,
        purpose=st.sampled_from(["smoke", "rollback"]),
    )
    def acquire(self, who: Principal, resource: tuple[str, str], ttl: int, purpose: str) -> Any:
        return self.acquire_as(who, resource, ttl, purpose)

    @rule(target=leases, pick=picks, ttl=ttls, colleague=st.none() | picks)
    def acquire_a_leased_resource(self, pick: int, ttl: int, colleague: int | None) -> Any:
        """Re-acquire as its holder (a new term), or contend for it as a colleague."""
        term = _pick(self.model.unreleased(), pick)
        if term is None:
            return multiple()
        who = _principal(term.organization, term.holder)
        if colleague is not None:
            who = _pick([p for p in PRINCIPALS if p.organization == term.organization], colleague)
        return self.acquire_as(who, term.resource, ttl, "again")

    def acquire_as(self, who: Principal, resource: tuple[str, str], ttl: int, purpose: str) -> Any:
        body = {
            "resource_type": resource[0],
            "resource_id": resource[1],
            "purpose": purpose,
            "ttl_seconds": ttl,
        }
        result = self.call(who, "POST", "/v1/leases", json=body)
        blocker = self.model.blocker(who, resource)
        if blocker is not None:
            message = f"Resource is leased by another principal until {iso(blocker.expires_at)}."
            assert (result.status_code, result.json) == (
                409,
                {"error": {"code": "CONFLICT", "message": message}},
            )
            return multiple()
        assert result.status_code == 201, result.json
        lease_id = result.json["data"]["lease_id"]
        assert LEASE_ID.fullmatch(lease_id) and lease_id not in self.model.leases
        term = self.model.acquire(who, resource, purpose, ttl, lease_id)
        assert result.json == {
            "data": {
                "lease_id": lease_id,
                "expires_at": iso(term.expires_at),
                "fencing_token": term.fencing_token,
            }
        }
        return lease_id

    @rule(who=principals, lease_id=st.one_of(leases, st.just(UNKNOWN_LEASE)))
    def check_lease(self, who: Principal, lease_id: str) -> None:
        result = self.call(who, "GET", f"/v1/leases/{lease_id}")
        term = self.model.visible_lease(who, lease_id)
        if term is None:
            assert (result.status_code, result.json["error"]["message"]) == (
                404,
                f"No unreleased lease {lease_id}.",
            )
            return
        assert (result.status_code, result.json) == (
            200,
            {
                "data": {
                    "lease_id": lease_id,
                    "resource_type": term.resource[0],
                    "resource_id": term.resource[1],
                    "holder": term.holder,
                    "purpose": term.purpose,
                    "acquired_at": iso(term.acquired_at),
                    "expires_at": iso(term.expires_at),
                    "fencing_token": term.fencing_token,
                    "expired": self.model.now >= term.expires_at,
                }
            },
        )

    @rule(pick=picks)
    def release_as_holder(self, pick: int) -> None:
        term = _pick(self.model.unreleased(), pick)
        if term is not None:
            self.release(_principal(term.organization, term.holder), term.lease_id)

    @rule(who=operators, pick=picks)
    def release_as_operator(self, who: Principal, pick: int) -> None:
        term = _pick(self.model.unreleased(), pick)
        if term is not None:
            self.release(who, term.lease_id)

    @rule(who=principals, lease_id=st.one_of(leases, st.just(UNKNOWN_LEASE)))
    def release_as_anyone(self, who: Principal, lease_id: str) -> None:
        self.release(who, lease_id)

    def release(self, who: Principal, lease_id: str) -> None:
        result = self.call(who, "DELETE", f"/v1/leases/{lease_id}")
        term = self.model.release(who, lease_id)
        if term is None:
            assert result.status_code == 404, result.json
            assert result.json["error"]["code"] == "NOT_FOUND"
            return
        assert (result.status_code, result.json) == (
            200,
            {"data": {"lease_id": lease_id, "released_at": iso(self.model.now)}},
        )

    # Handoffs

    @rule(
        target=handoffs,
        who=principals,
        colleague=st.integers(min_value=0, max_value=5),
        subject=subjects,
        message=messages,
    )
    def hand_off_to_a_colleague(
        self, who: Principal, colleague: int, subject: str, message: str | None
    ) -> Any:
        names = [p.name for p in PRINCIPALS if p.organization == who.organization]
        return self.hand_off(who, names[colleague % len(names)], subject, message)

    @rule(
        target=handoffs,
        who=principals,
        to=st.sampled_from(TARGETS),
        subject=subjects,
        message=messages,
    )
    def hand_off(self, who: Principal, to: str, subject: str, message: str | None) -> Any:
        body = {"to_principal": to, "subject_id": subject}
        if message is not None:
            body["message"] = message
        result = self.call(who, "POST", "/v1/handoffs", json=body)
        refusal = self.model.refusal(who, to)
        if refusal is not None:
            assert (result.status_code, result.json) == (
                400,
                {"error": {"code": "VALIDATION_ERROR", "message": refusal}},
            )
            return multiple()
        assert result.status_code == 201, result.json
        handoff_id = result.json["data"]["handoff_id"]
        assert HANDOFF_ID.fullmatch(handoff_id)
        assert result.json == {"data": {"handoff_id": handoff_id, "status": "pending"}}
        self.model.create(who, to, subject, message, handoff_id)
        return handoff_id

    @rule(pick=picks, accept=st.booleans())
    def resolve_as_target(self, pick: int, accept: bool) -> None:
        handoff = _pick(self.model.pending(), pick)
        if handoff is not None:
            who = _principal(handoff.organization, handoff.to_principal)
            self.resolve(who, handoff.handoff_id, accept)

    @rule(
        who=principals,
        handoff_id=st.one_of(handoffs, st.just(UNKNOWN_HANDOFF)),
        accept=st.booleans(),
    )
    def resolve(self, who: Principal, handoff_id: str, accept: bool) -> None:
        status = "accepted" if accept else "rejected"
        result = self.call(
            who, "POST", f"/v1/handoffs/{handoff_id}/resolve", json={"status": status}
        )
        expected = self.model.resolve(who, handoff_id, accept)
        assert result.status_code == expected, result.json
        if expected == 200:
            assert result.json == {"data": _handoff(self.model.handoffs[handoff_id])}
        elif expected == 400:
            assert result.json["error"]["message"] == (
                "Only the target principal can resolve a handoff."
            )

    @rule(who=principals, handoff_id=handoffs)
    def read_handoff(self, who: Principal, handoff_id: str) -> None:
        result = self.call(who, "GET", f"/v1/handoffs/{handoff_id}")
        handoff = self.model.visible(who, handoff_id)
        if handoff is None:
            assert result.status_code == 404, result.json
        else:
            assert (result.status_code, result.json) == (200, {"data": _handoff(handoff)})

    @rule(who=principals)
    def inbox(self, who: Principal) -> None:
        result = self.call(who, "GET", "/v1/handoffs")
        expected = [_inbox_item(h) for h in self.model.inbox(who)]
        assert result.json == {"data": {"handoffs": expected, "next_cursor": None}}

    # Audit

    @rule(who=agents, lease_id=leases, handoff_id=handoffs)
    def audit_as_an_agent(self, who: Principal, lease_id: str, handoff_id: str) -> None:
        for path in (
            "/v1/audit/leases?resource_type=deploy&resource_id=checkout",
            f"/v1/audit/leases/{lease_id}",
            f"/v1/audit/handoffs/{handoff_id}",
        ):
            result = self.call(who, "GET", path)
            assert (result.status_code, result.json["error"]["code"]) == (403, "FORBIDDEN")

    @rule(who=operators, resource=resources, ago=as_of_seconds_ago)
    def audit_resource(self, who: Principal, resource: tuple[str, str], ago: int | None) -> None:
        as_of = self._as_of(ago)
        params = {"resource_type": resource[0], "resource_id": resource[1], "limit": AUDIT_PAGE}
        if as_of is not None:
            params["as_of"] = iso(as_of)
        terms = [_term(term) for term in self.model.history(who.organization, resource, as_of)]
        cursor = None
        for start in range(0, len(terms) + 1, AUDIT_PAGE):  # + 1: one empty page when no terms
            paged = params if cursor is None else {**params, "cursor": cursor}
            result = self.call(who, "GET", "/v1/audit/leases", params=paged)
            shown = terms[start : start + AUDIT_PAGE]
            more = start + AUDIT_PAGE < len(terms)
            data = result.json["data"]
            cursor = data["next_cursor"]
            assert (cursor is not None) == more
            assert result.json == {
                "data": {
                    "resource_type": resource[0],
                    "resource_id": resource[1],
                    "as_of": None if as_of is None else iso(as_of),
                    "terms": shown,
                    "next_cursor": cursor,
                }
            }
            if not more:
                break

    @rule(who=operators, lease_id=leases, ago=as_of_seconds_ago)
    def audit_lease(self, who: Principal, lease_id: str, ago: int | None) -> None:
        as_of = self._as_of(ago)
        params = {} if as_of is None else {"as_of": iso(as_of)}
        result = self.call(who, "GET", f"/v1/audit/leases/{lease_id}", params=params)
        term = self.model.leases[lease_id]
        terms = self.model.history(who.organization, term.resource, as_of)
        then = next((t for t in terms if t.lease_id == lease_id), None)
        if term.organization != who.organization or then is None:
            assert result.status_code == 404, result.json
            return
        events = [{"type": "lease.acquired", "at": iso(then.acquired_at), "by": then.holder}]
        if then.ended is not None:
            events.append(
                {
                    "type": ENDING_TYPES[then.ended],
                    "at": iso(then.released_at),
                    "by": then.released_by,
                }
            )
        assert result.json == {
            "data": {
                "resource_type": term.resource[0],
                "resource_id": term.resource[1],
                "as_of": None if as_of is None else iso(as_of),
                **_term(then),
                "events": events,
            }
        }

    @rule(who=operators, handoff_id=handoffs, ago=as_of_seconds_ago)
    def audit_handoff(self, who: Principal, handoff_id: str, ago: int | None) -> None:
        as_of = self._as_of(ago)
        params = {} if as_of is None else {"as_of": iso(as_of)}
        result = self.call(who, "GET", f"/v1/audit/handoffs/{handoff_id}", params=params)
        handoff = self.model.handoffs[handoff_id]
        if handoff.organization != who.organization or (as_of and handoff.created_at > as_of):
            assert result.status_code == 404, result.json
            return
        resolved = handoff.resolved_at is not None and (
            as_of is None or handoff.resolved_at <= as_of
        )
        then = _handoff(handoff)
        events = [
            {"type": "handoff.created", "at": then["created_at"], "by": handoff.from_principal}
        ]
        if resolved:
            events.append(
                {
                    "type": f"handoff.{handoff.status}",
                    "at": then["resolved_at"],
                    "by": handoff.to_principal,
                }
            )
        else:
            then.update(status="pending", resolved_at=None)
        assert result.json == {
            "data": {"as_of": None if as_of is None else iso(as_of), **then, "events": events}
        }

    def every_history_equals_the_model(self) -> None:
        """At the end: the whole audited history of every resource and lease, as modelled."""
        for who in PRINCIPALS:
            if who.operator:
                for resource in RESOURCES:
                    self.audit_resource(who, resource, None)
        for lease_id, term in self.model.leases.items():
            self.audit_lease(_principal(term.organization, "ops"), lease_id, None)
        for handoff_id, handoff in self.model.handoffs.items():
            self.audit_handoff(_principal(handoff.organization, "ops"), handoff_id, None)

    # After every step

    @invariant()
    def projections_equal_the_model(self) -> None:
        index = {
            (
                row["lease_id"],
                row["organization"],
                row["resource_type"],
                row["resource_id"],
                row["holder"],
                row["purpose"],
                row["acquired_at"],
                row["expires_at"],
            )
            for row in self.services.lease_index.rows()
        }
        assert index == {
            (
                t.lease_id,
                t.organization,
                *t.resource,
                t.holder,
                t.purpose,
                iso(t.acquired_at),
                iso(t.expires_at),
            )
            for t in self.model.unreleased()
        }
        directory = {
            (row["lease_id"], row["organization"]) for row in self.services.lease_directory.rows()
        }
        assert directory == {(t.lease_id, t.organization) for t in self.model.leases.values()}
        inbox = [
            (row["handoff_id"], row["organization"], row["to_principal"], row["created_at"])
            for row in self.services.inbox.rows()
        ]
        assert inbox == [
            (h.handoff_id, h.organization, h.to_principal, iso(h.created_at))
            for h in self.model.pending()
        ]

    def _as_of(self, ago: int | None) -> datetime | None:
        return None if ago is None else self.model.now - timedelta(seconds=ago)


def _pick(items: list[Any], pick: int) -> Any:
    """One of the items (None if there are none), chosen by an integer hypothesis can shrink."""
    return items[pick % len(items)] if items else None


def _principal(organization: str, name: str) -> Principal:
    return next(p for p in PRINCIPALS if (p.organization, p.name) == (organization, name))


def _role(principal: Principal) -> str:
    return "operator" if principal.operator else "agent"


def _term(term: Term) -> dict[str, Any]:
    return {
        "lease_id": term.lease_id,
        "holder": term.holder,
        "purpose": term.purpose,
        "acquired_at": iso(term.acquired_at),
        "expires_at": iso(term.expires_at),
        "ttl_seconds": term.ttl_seconds,
        "fencing_token": term.fencing_token,
        "released_at": None if term.released_at is None else iso(term.released_at),
        "released_by": term.released_by,
        "ended": term.ended,
    }


def _inbox_item(handoff: Handoff) -> dict[str, Any]:
    return {
        "handoff_id": handoff.handoff_id,
        "from_principal": handoff.from_principal,
        "to_principal": handoff.to_principal,
        "subject_id": handoff.subject_id,
        "context_id": None,
        "checkpoint_id": None,
        "message": handoff.message,
        "status": handoff.status,
        "created_at": iso(handoff.created_at),
    }


def _handoff(handoff: Handoff) -> dict[str, Any]:
    resolved = None if handoff.resolved_at is None else iso(handoff.resolved_at)
    return {**_inbox_item(handoff), "resolved_at": resolved}


@pytest.mark.parametrize(("backend", "shard"), [(b, n) for b in EXAMPLES for n in range(SHARDS[b])])
def test_the_service_behaves_as_the_model_of_the_spec(backend: str, shard: int) -> None:
    if backend == "postgres":
        skip_or_fail_without_postgres()
    # A class of its own per shard: hypothesis seeds a derandomized run (CI) from its name, so
    # the shards draw different examples there too.
    machine = type(f"Spec_{backend}_{shard}", (Spec,), {"backend": backend})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES[backend] // SHARDS[backend],
            stateful_step_count=STEPS[backend],
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
