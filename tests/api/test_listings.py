"""GET /v1/leases and GET /v1/handoffs?scope=organization: what a console lists, by role.

Agents see their own leases and their own inbox; every other role (service/roles.py) the
organization's held leases and pending handoffs, paged, filtered, checked strictly.
"""

from __future__ import annotations

import pytest

from tests.support import bearer
from titen.service.roles import AGENT, ROLES

READERS = [role for role in ROLES if role != AGENT]
"""The roles that read the organization: each is tested as it appears in the role list."""


def acquire(client, key, resource_id: str, resource_type: str = "deploy", ttl: int = 60) -> str:
    body = {
        "resource_type": resource_type,
        "resource_id": resource_id,
        "purpose": f"work on {resource_id}",
        "ttl_seconds": ttl,
    }
    result = client.simulate_post("/v1/leases", json=body, headers=bearer(key))
    assert result.status_code == 201, result.text
    return result.json["data"]["lease_id"]


def leases(client, key, **params) -> dict:
    result = client.simulate_get("/v1/leases", params=params, headers=bearer(key))
    assert result.status_code == 200, result.text
    return result.json["data"]


def ids(page: dict, kind: str = "leases") -> list[str]:
    field = "lease_id" if kind == "leases" else "handoff_id"
    return [item[field] for item in page[kind]]


def hand(client, key, to: str, subject: str) -> str:
    body = {"to_principal": to, "subject_id": subject, "message": f"about {subject}"}
    result = client.simulate_post("/v1/handoffs", json=body, headers=bearer(key))
    assert result.status_code == 201, result.text
    return result.json["data"]["handoff_id"]


def handoffs(client, key, **params) -> dict:
    result = client.simulate_get("/v1/handoffs", params=params, headers=bearer(key))
    assert result.status_code == 200, result.text
    return result.json["data"]


@pytest.fixture(params=READERS)
def reader(request, key):
    return key("acme", f"reader_{request.param}", role=request.param)


def test_a_reader_lists_the_organizations_held_leases_newest_first(client, reader, alice, bob):
    first = acquire(client, alice, "a")
    second = acquire(client, bob, "b")
    acquire(client, bob, "c")
    released = acquire(client, alice, "d")
    assert (
        client.simulate_delete(f"/v1/leases/{released}", headers=bearer(alice)).status == "200 OK"
    )
    renewed = acquire(client, alice, "a")  # supersedes `first`
    page = leases(client, reader)
    assert ids(page)[0] == renewed
    assert first not in ids(page) and released not in ids(page)
    assert len(ids(page)) == 3 and page["next_cursor"] is None
    shown = next(lease for lease in page["leases"] if lease["lease_id"] == second)
    checked = client.simulate_get(f"/v1/leases/{second}", headers=bearer(bob)).json["data"]
    assert shown == checked  # the same fields as the check, fencing token and all


def test_an_agent_lists_only_its_own_leases(client, alice, bob):
    mine = acquire(client, alice, "a")
    acquire(client, bob, "b")
    assert ids(leases(client, alice)) == [mine]
    assert ids(leases(client, alice, holder="agent_alice")) == [mine]
    assert ids(leases(client, alice, holder="agent_bob")) == []


def test_leases_page_by_cursor_and_filter_by_holder_and_type(client, reader, alice, bob):
    made = [acquire(client, alice if n % 2 else bob, f"r{n}", f"t{n % 3}") for n in range(7)]
    seen, cursor = [], None
    while True:
        page = leases(client, reader, limit=3, **({"cursor": cursor} if cursor else {}))
        seen += ids(page)
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == made[::-1]
    assert ids(leases(client, reader, holder="agent_alice")) == made[1::2][::-1]
    assert ids(leases(client, reader, resource_type="t0")) == [made[6], made[3], made[0]]
    both = leases(client, reader, resource_type="t1", holder="agent_alice")
    assert ids(both) == [made[1]]


def test_an_expired_lease_is_listed_as_expired_until_replaced(client, clock, reader, alice, bob):
    lease_id = acquire(client, alice, "a", ttl=10)
    clock.advance(11)
    (listed,) = leases(client, reader)["leases"]
    assert listed["lease_id"] == lease_id and listed["expired"] is True
    taken = acquire(client, bob, "a")
    assert ids(leases(client, reader)) == [taken]
    assert leases(client, reader)["leases"][0]["expired"] is False


def test_other_organizations_leases_are_never_listed(client, key, reader, alice):
    acquire(client, key("other", "agent_x", role="operator"), "a")
    mine = acquire(client, alice, "a")
    assert ids(leases(client, reader)) == [mine]


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"limit": "0"}, "limit must be an integer from 1 to 500."),
        ({"limit": "x"}, "limit must be an integer from 1 to 500."),
        ({"cursor": "nope"}, "cursor is not valid"),
        ({"holder": ""}, "holder must not be empty."),
        ({"resource_type": "t" * 201}, "resource_type must be at most 200 characters."),
        ({"holder": "a\nb"}, "holder must not contain control characters."),
        ({"owner": "x"}, "Unknown query parameter: owner."),
        ({"holder": ["a", "b"]}, "holder must be given once."),
    ],
)
def test_bad_lease_listing_parameters_are_400_in_titens_words(client, alice, params, says):
    result = client.simulate_get("/v1/leases", params=params, headers=bearer(alice))
    assert result.status_code == 400
    assert result.json["error"]["code"] == "VALIDATION_ERROR"
    assert says in result.json["error"]["message"]


def test_listing_leases_needs_a_key(client):
    assert client.simulate_get("/v1/leases").status_code == 401


def test_a_reader_lists_the_organizations_pending_handoffs(client, reader, alice, bob, sender):
    first = hand(client, alice, "agent_bob", "s1")
    second = hand(client, bob, "agent_sender", "s2")
    resolved = hand(client, sender, "agent_alice", "s3")
    third = hand(client, sender, "agent_bob", "s4")
    answer = client.simulate_post(
        f"/v1/handoffs/{resolved}/resolve", json={"status": "accepted"}, headers=bearer(alice)
    )
    assert answer.status_code == 200
    page = handoffs(client, reader, scope="organization")
    assert ids(page, "handoffs") == [first, second, third]
    assert page["handoffs"][0]["message"] == "about s1"
    to_bob = handoffs(client, reader, scope="organization", to_principal="agent_bob")
    assert ids(to_bob, "handoffs") == [first, third]
    one = handoffs(client, reader, scope="organization", limit=2)
    rest = handoffs(client, reader, scope="organization", cursor=one["next_cursor"])
    assert ids(one, "handoffs") + ids(rest, "handoffs") == [first, second, third]
    assert rest["next_cursor"] is None
    assert ids(handoffs(client, bob), "handoffs") == [first, third]  # the inbox, unchanged


def test_an_agent_asking_for_the_organizations_handoffs_gets_403(client, alice, bob):
    hand(client, bob, "agent_alice", "s1")
    result = client.simulate_get(
        "/v1/handoffs", params={"scope": "organization"}, headers=bearer(alice)
    )
    assert result.status_code == 403
    assert result.json["error"]["code"] == "FORBIDDEN"
    readers = " or ".join(READERS)
    assert (
        result.json["error"]["message"] == f"The organization's handoffs need the {readers} role."
    )


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"scope": "everyone"}, "scope must be organization, or left out for the inbox."),
        ({"scope": ["organization", "organization"]}, "scope must be given once."),
        ({"to_principal": "agent_bob"}, "Unknown query parameter: to_principal."),
        ({"scope": "organization", "subject_id": "s"}, "Unknown query parameter: subject_id."),
        ({"scope": "organization", "to_principal": ""}, "to_principal must not be empty."),
        ({"scope": "organization", "limit": "501"}, "limit must be an integer from 1 to 500."),
    ],
)
def test_bad_handoff_listing_parameters_are_400_in_titens_words(client, ops, params, says):
    result = client.simulate_get("/v1/handoffs", params=params, headers=bearer(ops))
    assert result.status_code == 400
    assert result.json["error"] == {"code": "VALIDATION_ERROR", "message": says}
