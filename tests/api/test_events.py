"""GET /v1/events: each organization's committed public events, in order, on both backends."""

from __future__ import annotations

import threading
import time

import pytest

from tests.support import bearer, eventually

ACQUIRE = {"resource_type": "deploy", "resource_id": "checkout", "purpose": "p", "ttl_seconds": 60}
ENVELOPE = {"specversion", "id", "source", "type", "time", "subject", "datacontenttype", "data"}


def events(client, key, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    result = client.simulate_get(f"/v1/events?{query}", headers=bearer(key))
    assert result.status_code == 200, result.json
    return result.json["data"]


def post(client, key, path, body):
    return client.simulate_post(path, json=body, headers=bearer(key))


def handoff(client, key, to="agent_bob", subject="user_rama"):
    result = post(client, key, "/v1/handoffs", {"to_principal": to, "subject_id": subject})
    assert result.status_code == 201, result.json
    return result.json["data"]["handoff_id"]


def test_only_the_four_public_types_are_published_in_commit_order(
    client, services, clock, alice, bob, dispatcher
):
    lease_id = post(client, alice, "/v1/leases", ACQUIRE).json["data"]["lease_id"]
    client.simulate_delete(f"/v1/leases/{lease_id}", headers=bearer(alice))  # not published
    accepted, rejected = handoff(client, alice), handoff(client, alice, subject="user_b")
    post(client, bob, f"/v1/handoffs/{accepted}/resolve", {"status": "accepted"})
    post(client, bob, f"/v1/handoffs/{rejected}/resolve", {"status": "rejected"})
    page = events(client, dispatcher)
    assert [e["type"] for e in page["events"]] == [
        "lease.acquired",
        "handoff.created",
        "handoff.created",
        "handoff.accepted",
        "handoff.rejected",
    ]
    cursors = [services.cursors.open(e["cursor"]) for e in page["events"]]
    assert cursors == sorted(cursors) and len(set(cursors)) == len(cursors)
    assert page["next_cursor"] == page["events"][-1]["cursor"]


def test_each_event_is_a_cloudevent_with_what_a_subscriber_needs(client, clock, alice, bob):
    lease = post(client, alice, "/v1/leases", ACQUIRE).json["data"]
    handoff_id = handoff(client, alice)
    clock.advance(2)
    post(client, bob, f"/v1/handoffs/{handoff_id}/resolve", {"status": "accepted"})
    acquired, created, accepted = events(client, alice)["events"]
    for event in (acquired, created, accepted):
        assert set(event) == ENVELOPE | {"cursor"}
        assert (event["specversion"], event["datacontenttype"]) == ("1.0", "application/json")
        assert event["source"] == "/titen/organizations/acme"
    assert acquired["subject"] == lease["lease_id"]
    assert acquired["data"] == {
        "lease_id": lease["lease_id"],
        "resource_type": "deploy",
        "resource_id": "checkout",
        "holder": "agent_alice",
        "acquired_at": "2026-07-30T10:48:13.829Z",
        "expires_at": lease["expires_at"],
        "fencing_token": 1,
    }
    assert created["subject"] == accepted["subject"] == handoff_id
    assert created["data"] == {
        "handoff_id": handoff_id,
        "from_principal": "agent_alice",
        "to_principal": "agent_bob",
        "subject_id": "user_rama",
        "context_id": None,
        "checkpoint_id": None,
        "message": None,
        "status": "pending",
        "created_at": "2026-07-30T10:48:13.829Z",
        "resolved_at": None,
    }
    assert accepted["data"] == {
        **created["data"],
        "status": "accepted",
        "resolved_at": "2026-07-30T10:48:15.829Z",
    }
    assert accepted["time"] == "2026-07-30T10:48:15.829Z"
    assert len({acquired["id"], created["id"], accepted["id"]}) == 3


def test_failed_commands_publish_nothing(client, services, key, alice, bob):
    post(client, alice, "/v1/leases", ACQUIRE)
    before = events(client, alice)["events"]
    post(client, bob, "/v1/leases", ACQUIRE)  # 409
    post(client, alice, "/v1/leases", {**ACQUIRE, "ttl_seconds": 1})  # 400
    post(client, alice, "/v1/handoffs", {"to_principal": "nobody", "subject_id": "s"})  # 400
    assert events(client, alice)["events"] == before


def test_a_principal_sees_only_its_own_organizations_events(client, key, alice):
    post(client, alice, "/v1/leases", ACQUIRE)
    outsider = key("umbra", "agent_alice")
    post(client, outsider, "/v1/leases", {**ACQUIRE, "resource_id": "other"})
    mine = events(client, alice)["events"]
    theirs = events(client, outsider)["events"]
    assert [e["data"]["resource_id"] for e in mine] == ["checkout"]
    assert [e["data"]["resource_id"] for e in theirs] == ["other"]


def test_receiving_an_event_grants_nothing(client, key, alice, bob):
    carol = key("acme", "carol", role="dispatcher")
    handoff_id = handoff(client, alice)  # to bob
    seen = events(client, carol)["events"]
    assert seen[0]["data"]["handoff_id"] == handoff_id
    refused = post(client, carol, f"/v1/handoffs/{handoff_id}/resolve", {"status": "accepted"})
    assert refused.status_code in (400, 404)
    assert client.simulate_get("/v1/handoffs", headers=bearer(carol)).json["data"]["handoffs"] == []
    lease = post(client, alice, "/v1/leases", ACQUIRE).json["data"]
    assert events(client, carol)["events"][-1]["data"]["lease_id"] == lease["lease_id"]
    gone = client.simulate_delete(f"/v1/leases/{lease['lease_id']}", headers=bearer(carol))
    assert gone.status_code == 404


def test_paging_by_cursor_and_filtering_by_type(client, alice, bob, dispatcher):
    for n in range(5):
        post(client, alice, "/v1/leases", {**ACQUIRE, "resource_id": f"r{n}"})
        handoff(client, alice, subject=f"s{n}")
    for reader in (bob, dispatcher):  # bob reads through the parties' rows
        first = events(client, reader, limit=3)
        rest = events(client, reader, after=first["next_cursor"], limit=100)
        assert first["events"] + rest["events"] == events(client, reader)["events"]
    everything = events(client, dispatcher)
    assert len(everything["events"]) == 10
    handoffs = events(client, dispatcher, types="handoff.created")
    assert [e["data"]["subject_id"] for e in handoffs["events"]] == [f"s{n}" for n in range(5)]
    assert events(client, bob, types="handoff.created,lease.acquired") == handoffs
    both = events(client, dispatcher, types="handoff.created,lease.acquired")
    assert both["events"] == everything["events"]


def test_next_cursor_is_never_null(client, services, alice):
    opened = services.cursors.open
    assert opened(events(client, alice)["next_cursor"]) == 0
    far = services.cursors.seal(12345)
    page = events(client, alice, after=far)
    assert page["events"] == [] and opened(page["next_cursor"]) == 12345
    post(client, alice, "/v1/leases", ACQUIRE)
    tail = events(client, alice, after="latest")
    assert tail["events"] == []
    assert opened(tail["next_cursor"]) == opened(events(client, alice)["next_cursor"]) > 0


def test_two_latest_cursors_differ_and_each_resumes_exactly(client, key, alice, dispatcher):
    umbra = key("umbra", "agent_u")
    post(client, alice, "/v1/leases", ACQUIRE)
    for reader in (alice, dispatcher, umbra):
        first = events(client, reader, after="latest")["next_cursor"]
        second = events(client, reader, after="latest")["next_cursor"]
        assert first != second
        # Another organization's commits change nothing a reader is answered.
        post(
            client,
            umbra if reader != umbra else alice,
            "/v1/leases",
            {**ACQUIRE, "resource_id": "o"},
        )
        assert events(client, reader, after=first)["events"] == []
        mine = post(client, reader, "/v1/leases", {**ACQUIRE, "resource_id": f"m{reader[-6:]}"})
        for cursor in (first, second):
            page = events(client, reader, after=cursor)
            assert [e["subject"] for e in page["events"]] == [mine.json["data"]["lease_id"]]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("after=abc", "after"),
        ("after=12345", "after"),
        ("types=lease.released", "types"),
        ("types=", "types"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("since=1", "Unknown query parameter"),
        ("limit=2.5", "limit"),
        ("wait=31", "wait"),
        ("wait=soon", "wait"),
    ],
)
def test_bad_parameters_are_400_naming_them(client, alice, query, field):
    result = client.simulate_get(f"/v1/events?{query}", headers=bearer(alice))
    assert result.status_code == 400
    assert result.json["error"]["code"] == "VALIDATION_ERROR"
    assert result.json["error"]["message"].startswith(field)


def test_events_need_a_key(client):
    assert client.simulate_get("/v1/events").status_code == 401
    assert client.simulate_get("/v1/events/stream").status_code == 401


def waits_begun(services, monkeypatch) -> list[int]:
    """How many times a long-poll has begun to wait for its organization's rows, counted as it
    happens (`[n]`)."""
    begun = [0]
    wait_past = services.recent_events.wait_past

    def counting(*args, **kwargs):
        begun[0] += 1
        return wait_past(*args, **kwargs)

    monkeypatch.setattr(services.recent_events, "wait_past", counting)
    return begun


def test_a_long_poll_answers_as_soon_as_a_matching_event_commits(
    client, services, monkeypatch, alice, bob
):
    start = events(client, bob)["next_cursor"]
    begun = waits_begun(services, monkeypatch)

    def later() -> None:
        eventually(lambda: begun[0] == 1, "the long-poll waiting")
        post(client, alice, "/v1/leases", {**ACQUIRE, "resource_id": "noise"})
        eventually(lambda: begun[0] == 2, "the long-poll woken by the noise, waiting again")
        handoff(client, alice)

    writer = threading.Thread(target=later)
    began = time.monotonic()
    writer.start()
    page = events(client, bob, after=start, types="handoff.created", wait=10)
    waited = time.monotonic() - began
    writer.join()
    assert [e["type"] for e in page["events"]] == ["handoff.created"]
    assert begun[0] == 2  # the noise did not end the wait
    assert waited < 5


def test_a_long_poll_with_nothing_new_answers_empty_after_the_wait(client, alice):
    began = time.monotonic()
    page = events(client, alice, after="latest", wait=0.5)
    assert page["events"] == []
    assert 0.45 < time.monotonic() - began < 3
