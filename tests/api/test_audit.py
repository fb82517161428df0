"""The audit routes, replayed from the event log, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import bearer
from titen.domain.cursors import unsealed_cursor
from titen.domain.ids import LEASE, new_id
from titen.domain.lease import Lease
from titen.service.bootstrap import bootstrap

ACQUIRE = {"resource_type": "deploy", "resource_id": "checkout", "purpose": "p", "ttl_seconds": 60}
RESOURCE = {"resource_type": "deploy", "resource_id": "checkout"}


@pytest.fixture
def umbra_ops(key):
    return key("umbra", "ops", role="operator")


def acquire(client, key, **changes) -> dict:
    result = client.simulate_post("/v1/leases", json={**ACQUIRE, **changes}, headers=bearer(key))
    assert result.status_code == 201, result.json
    return result.json["data"]


def release(client, key, lease_id: str) -> dict:
    result = client.simulate_delete(f"/v1/leases/{lease_id}", headers=bearer(key))
    assert result.status_code == 200, result.json
    return result.json["data"]


def audit(client, key, path: str, **params):
    return client.simulate_get(f"/v1/audit/{path}", params=params, headers=bearer(key))


def history(client, key, **params) -> list[dict]:
    result = audit(client, key, "leases", **RESOURCE, **params)
    assert result.status_code == 200, result.json
    return result.json["data"]["terms"]


def page(client, key, **params) -> tuple[list[str], str | None]:
    """One page of the resource's terms: their lease ids, and next_cursor."""
    result = audit(client, key, "leases", **RESOURCE, **params)
    assert result.status_code == 200, result.json
    data = result.json["data"]
    return [t["lease_id"] for t in data["terms"]], data["next_cursor"]


def pages(client, key, **params) -> list[list[str]]:
    """Every page of the resource's terms, following next_cursor."""
    found, cursor = page(client, key, **params)
    walked = [found]
    while cursor is not None:
        found, cursor = page(client, key, **params, cursor=cursor)
        walked.append(found)
    return walked


def long_history(services, clock, terms: int) -> list[str]:
    """`terms` terms on the resource, each superseding the last, saved in one transaction."""
    resource = ("acme", "deploy", "checkout")
    lease = Lease(services.app.resource_keys.of(*resource), *resource, timestamp=clock.now())
    ids = []
    for _ in range(terms):
        clock.advance(1)
        holding = lease.acquire(
            lease_id=new_id(LEASE),
            holder="agent_alice",
            purpose="p",
            now=clock.now(),
            ttl_seconds=60,
        )
        ids.append(holding.lease_id)
    services.app.save(lease)
    return ids


class EventReads:
    """Counts the stored events the event store hands out: the work a request does."""

    def __init__(self, recorder: Any, monkeypatch: pytest.MonkeyPatch):
        self.rows = 0
        select = recorder.select_events

        def counting(*args: Any, **kwargs: Any) -> Any:
            rows = select(*args, **kwargs)
            self.rows += len(rows)
            return rows

        monkeypatch.setattr(recorder, "select_events", counting)

    def during(self, request: Any) -> int:
        before = self.rows
        request()
        return self.rows - before


def test_an_operator_reads_every_term_on_a_resource_and_how_each_ended(
    client, clock, alice, bob, ops
):
    first = acquire(client, alice)
    clock.advance(5)
    second = acquire(client, alice)  # supersedes the first
    clock.advance(60)
    third = acquire(client, bob)  # the second expired: replaced after expiry
    clock.advance(5)
    release(client, ops, third["lease_id"])
    clock.advance(5)
    fourth = acquire(client, alice)
    clock.advance(1)
    released = release(client, alice, fourth["lease_id"])
    clock.advance(1)
    fifth = acquire(client, bob, purpose="still going", ttl_seconds=600)

    terms = history(client, ops)
    assert [(t["lease_id"], t["holder"], t["ended"], t["released_by"]) for t in terms] == [
        (first["lease_id"], "agent_alice", "superseded", "agent_alice"),
        (second["lease_id"], "agent_alice", "replaced_after_expiry", "agent_bob"),
        (third["lease_id"], "agent_bob", "released_by_operator", "ops"),
        (fourth["lease_id"], "agent_alice", "released", "agent_alice"),
        (fifth["lease_id"], "agent_bob", None, None),
    ]
    assert terms[3]["released_at"] == released["released_at"]
    assert [t["fencing_token"] for t in terms] == [1, 2, 3, 4, 5]
    assert terms[4] == {
        "lease_id": fifth["lease_id"],
        "holder": "agent_bob",
        "purpose": "still going",
        "acquired_at": terms[4]["acquired_at"],
        "expires_at": fifth["expires_at"],
        "ttl_seconds": 600,
        "fencing_token": 5,
        "released_at": None,
        "released_by": None,
        "ended": None,
    }


def test_as_of_answers_who_held_the_resource_at_that_moment(client, clock, alice, bob, ops):
    acquire(client, alice)  # 10:48:13.829, until 10:49:13.829
    clock.advance(120)
    acquire(client, bob)  # 10:50:13.829
    at_1049 = history(client, ops, as_of="2026-07-30T10:49:00Z")
    assert [(t["holder"], t["ended"]) for t in at_1049] == [("agent_alice", None)]
    at_1052 = history(client, ops, as_of="2026-07-30T12:52:00+02:00")
    assert [(t["holder"], t["ended"]) for t in at_1052] == [
        ("agent_alice", "replaced_after_expiry"),
        ("agent_bob", None),
    ]
    assert history(client, ops, as_of="2026-07-30T10:00:00.000Z") == []
    result = audit(client, ops, "leases", **RESOURCE, as_of="2026-07-30T10:49:00Z")
    assert result.json["data"]["as_of"] == "2026-07-30T10:49:00.000Z"


def test_an_ended_lease_is_found_by_its_id_with_its_events(client, clock, alice, ops):
    lease = acquire(client, alice)
    clock.advance(3)
    released = release(client, alice, lease["lease_id"])

    result = audit(client, ops, f"leases/{lease['lease_id']}")
    assert result.status_code == 200
    data = result.json["data"]
    assert (data["resource_type"], data["resource_id"], data["ended"]) == (
        "deploy",
        "checkout",
        "released",
    )
    assert data["events"] == [
        {"type": "lease.acquired", "at": data["acquired_at"], "by": "agent_alice"},
        {"type": "lease.released", "at": released["released_at"], "by": "agent_alice"},
    ]

    before = audit(client, ops, f"leases/{lease['lease_id']}", as_of=data["acquired_at"])
    assert (before.json["data"]["ended"], len(before.json["data"]["events"])) == (None, 1)
    earlier = audit(client, ops, f"leases/{lease['lease_id']}", as_of="2026-07-30T10:00:00Z")
    assert earlier.status_code == 404


def test_a_handoff_history_as_of_before_and_after_its_resolution(client, clock, key, ops):
    sender = key("acme", "agent_sender")
    target = key("acme", "agent_target")
    created = client.simulate_post(
        "/v1/handoffs",
        json={"to_principal": "agent_target", "subject_id": "user_rama", "message": "yours"},
        headers=bearer(sender),
    ).json["data"]
    clock.advance(30)
    resolved = client.simulate_post(
        f"/v1/handoffs/{created['handoff_id']}/resolve",
        json={"status": "accepted"},
        headers=bearer(target),
    ).json["data"]

    path = f"handoffs/{created['handoff_id']}"
    now = audit(client, ops, path).json["data"]
    assert (now["status"], now["resolved_at"]) == ("accepted", resolved["resolved_at"])
    assert now["message"] == "yours"
    assert [(e["type"], e["by"]) for e in now["events"]] == [
        ("handoff.created", "agent_sender"),
        ("handoff.accepted", "agent_target"),
    ]
    then = audit(client, ops, path, as_of=now["created_at"]).json["data"]
    assert (then["status"], then["resolved_at"], len(then["events"])) == ("pending", None, 1)
    assert audit(client, ops, path, as_of="2026-07-30T10:00:00Z").status_code == 404


def test_agents_get_403_on_every_audit_route_whatever_they_ask(client, alice):
    lease = acquire(client, alice)
    for path, params in [
        ("leases", RESOURCE),
        ("leases", {}),
        (f"leases/{lease['lease_id']}", {}),
        ("leases/lease_unknown", {"as_of": "nonsense"}),
        ("handoffs/hoff_" + "0" * 32, {}),
    ]:
        result = audit(client, alice, path, **params)
        assert result.status_code == 403
        assert result.json["error"]["code"] == "FORBIDDEN"
    assert client.simulate_get("/v1/audit/leases", params=RESOURCE).status_code == 401


def test_another_organizations_items_are_not_found_and_its_resources_are_empty(
    client, key, alice, umbra_ops
):
    lease = acquire(client, alice)
    key("acme", "agent_target")
    handoff = client.simulate_post(
        "/v1/handoffs",
        json={"to_principal": "agent_target", "subject_id": "s"},
        headers=bearer(alice),
    ).json["data"]
    for path in (f"leases/{lease['lease_id']}", f"handoffs/{handoff['handoff_id']}"):
        result = audit(client, umbra_ops, path)
        assert result.status_code == 404
        assert result.json["error"]["code"] == "NOT_FOUND"
    assert history(client, umbra_ops) == []


@pytest.mark.parametrize("as_of", ["yesterday", "2026-07-30", "2026-07-30T10:52:00", ""])
def test_a_bad_as_of_is_400_on_every_route(client, alice, ops, as_of):
    lease = acquire(client, alice)
    for path, params in [
        ("leases", RESOURCE),
        (f"leases/{lease['lease_id']}", {}),
        ("handoffs/hoff_" + "0" * 32, {}),
    ]:
        result = client.simulate_get(
            f"/v1/audit/{path}",
            query_string="&".join([*(f"{k}={v}" for k, v in params.items()), f"as_of={as_of}"]),
            headers=bearer(ops),
        )
        assert result.status_code == 400, (path, result.json)
        assert result.json["error"]["code"] == "VALIDATION_ERROR"
        assert "as_of" in result.json["error"]["message"]


def test_query_parameters_are_checked(client, ops):
    missing = audit(client, ops, "leases", resource_type="deploy")
    assert (missing.status_code, missing.json["error"]["message"]) == (
        400,
        "Missing field: resource_id.",
    )
    unknown = audit(client, ops, "leases", **RESOURCE, holder="x")
    assert (unknown.status_code, unknown.json["error"]["message"]) == (
        400,
        "Unknown field: holder.",
    )
    twice = client.simulate_get(
        "/v1/audit/leases",
        query_string="resource_type=a&resource_type=b&resource_id=c",
        headers=bearer(ops),
    )
    assert (twice.status_code, twice.json["error"]["message"]) == (
        400,
        "resource_type must be given once.",
    )
    long = audit(client, ops, "leases", resource_type="x" * 201, resource_id="c")
    assert long.status_code == 400


def test_unknown_and_malformed_ids_are_404(client, ops):
    for path in (
        "leases/lease_" + "0" * 32,
        "leases/anything",
        "handoffs/hoff_" + "0" * 32,
        "handoffs/hoff_" + "A" * 32,
        "handoffs/lease_" + "0" * 32,
    ):
        assert audit(client, ops, path).status_code == 404, path


def test_a_lease_begun_in_another_process_a_moment_ago_is_found(services, client, clock, ops):
    other = bootstrap(services.database.url, clock, pool_size=2)
    try:
        term = other.app.acquire_lease(
            organization="acme",
            holder="agent_elsewhere",
            resource_type="deploy",
            resource_id="checkout",
            purpose="p",
            ttl_seconds=60,
        ).value  # committed, not yet applied to any projection
    finally:
        other.close()
    result = audit(client, ops, f"leases/{term.lease_id}")
    assert result.status_code == 200
    assert result.json["data"]["holder"] == "agent_elsewhere"


def test_pages_walk_every_term_once_oldest_first(client, clock, alice, ops):
    ids = []
    for _ in range(7):
        clock.advance(1)
        ids.append(acquire(client, alice)["lease_id"])
    assert pages(client, ops, limit=3) == [ids[0:3], ids[3:6], ids[6:7]]
    assert pages(client, ops, limit=7) == [ids]
    assert pages(client, ops) == [ids]  # 50 by default
    first = audit(client, ops, "leases", **RESOURCE, limit=3).json["data"]
    assert [t["fencing_token"] for t in first["terms"]] == [1, 2, 3]
    assert (first["resource_type"], first["resource_id"]) == ("deploy", "checkout")


def test_a_term_begun_between_pages_is_on_a_later_page_and_none_repeats(client, clock, alice, ops):
    ids = [acquire(client, alice)["lease_id"] for _ in range(3)]
    first, cursor = page(client, ops, limit=2)
    assert first == ids[:2] and cursor is not None
    clock.advance(1)
    ids.append(acquire(client, alice)["lease_id"])  # supersedes the third, shown on no page yet
    result = audit(client, ops, "leases", **RESOURCE, limit=2, cursor=cursor).json["data"]
    assert [(t["lease_id"], t["ended"]) for t in result["terms"]] == [
        (ids[2], "superseded"),
        (ids[3], None),
    ]
    assert result["next_cursor"] is None


def test_the_last_page_ending_on_a_current_term_resumes_after_it(client, clock, alice, ops):
    ids = [acquire(client, alice)["lease_id"] for _ in range(3)]
    assert page(client, ops, limit=3) == (ids, None)
    # a client that kept the last page's place (the cursor of a page ending on the third term)
    second_page = audit(
        client, ops, "leases", **RESOURCE, limit=2, cursor=page(client, ops, limit=2)[1]
    )
    assert [t["lease_id"] for t in second_page.json["data"]["terms"]] == [ids[2]]
    ids.append(acquire(client, alice)["lease_id"])
    _, cursor = page(client, ops, limit=3)
    assert page(client, ops, limit=3, cursor=cursor) == ([ids[3]], None)


def test_as_of_pages_the_terms_as_they_stood(client, clock, alice, ops):
    for _ in range(5):
        clock.advance(10)
        acquire(client, alice)
    terms = history(client, ops)
    then = terms[2]["acquired_at"]
    ids = [t["lease_id"] for t in terms]
    assert pages(client, ops, limit=2, as_of=then) == [ids[0:2], ids[2:3]]
    _, cursor = page(client, ops, limit=2, as_of=then)
    last = audit(client, ops, "leases", **RESOURCE, limit=2, as_of=then, cursor=cursor)
    assert (last.json["data"]["terms"][0]["ended"], last.json["data"]["as_of"]) == (None, then)
    assert pages(client, ops, limit=2, as_of="2026-07-30T10:00:00Z") == [[]]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("limit=1.0", "limit"),
        ("limit=", "limit"),
        ("limit=1&limit=2", "limit"),
        ("cursor=nonsense", "cursor"),
        ("cursor=", "cursor"),
        ("cursor=a&cursor=b", "cursor"),
        (f"cursor={unsealed_cursor(2**63 - 1)}0", "cursor"),
        (f"cursor={unsealed_cursor(2)}", "cursor"),  # a new store handed out no unsealed one
        ("page=2", "page"),
    ],
)
def test_bad_paging_parameters_are_400_naming_them(client, ops, query, named):
    result = client.simulate_get(
        "/v1/audit/leases",
        query_string=f"resource_type=deploy&resource_id=checkout&{query}",
        headers=bearer(ops),
    )
    assert result.status_code == 400, result.json
    assert result.json["error"]["code"] == "VALIDATION_ERROR"
    assert named in result.json["error"]["message"]


@pytest.mark.parametrize("param", ["limit=2", "cursor=x"])
def test_the_single_item_routes_take_no_paging_parameters(client, alice, ops, param):
    lease = acquire(client, alice)
    result = client.simulate_get(
        f"/v1/audit/leases/{lease['lease_id']}", query_string=param, headers=bearer(ops)
    )
    assert result.status_code == 400
    assert param.split("=")[0] in result.json["error"]["message"]


def test_a_page_reads_the_events_of_its_terms_not_the_whole_history(
    services, client, clock, ops, monkeypatch
):
    ids = long_history(services, clock, 600)  # 1,201 events, with snapshots along the way
    reads = EventReads(services.app.recorder, monkeypatch)
    cursor = None
    shown: list[str] = []

    def one_page() -> None:
        nonlocal cursor
        params = {"limit": 20} if cursor is None else {"limit": 20, "cursor": cursor}
        found, cursor = page(client, ops, **params)
        shown.extend(found)

    assert reads.during(one_page) <= 2 * 20 + 2
    while cursor is not None:
        assert reads.during(one_page) <= 2 * 20 + 2
    assert shown == ids


def test_one_lease_is_audited_from_its_own_events(services, client, clock, ops, monkeypatch):
    ids = long_history(services, clock, 300)
    reads = EventReads(services.app.recorder, monkeypatch)
    for n in (0, 150, 299):
        answers: list[Any] = []
        path = f"leases/{ids[n]}"
        assert (
            reads.during(
                lambda path=path, answers=answers: answers.append(audit(client, ops, path))
            )
            <= 3
        )
        data = answers[0].json["data"]
        assert (data["lease_id"], data["fencing_token"]) == (ids[n], n + 1)
        assert (data["resource_type"], data["resource_id"]) == ("deploy", "checkout")
        assert [e["type"] for e in data["events"]] == (
            ["lease.acquired"] if n == 299 else ["lease.acquired", "lease.superseded"]
        )
