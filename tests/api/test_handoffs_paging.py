"""The inbox pages: oldest first, an opaque cursor, exact while handoffs keep arriving."""

from __future__ import annotations

import threading

import pytest

from tests.support import bearer


def hand(client, key, subject: str, to: str = "agent_reviewer") -> str:
    result = client.simulate_post(
        "/v1/handoffs", json={"to_principal": to, "subject_id": subject}, headers=bearer(key)
    )
    assert result.status_code == 201, result.text
    return result.json["data"]["handoff_id"]


def page(client, key, **params) -> dict:
    result = client.simulate_get("/v1/handoffs", params=params, headers=bearer(key))
    assert result.status_code == 200, result.text
    return result.json["data"]


def read_all(client, key, limit: int, **params) -> list[str]:
    """Follow next_cursor to the end, one request per page."""
    seen: list[str] = []
    cursor = None
    while True:
        data = page(client, key, limit=limit, **params, **({"cursor": cursor} if cursor else {}))
        seen += [h["handoff_id"] for h in data["handoffs"]]
        cursor = data["next_cursor"]
        if cursor is None:
            return seen


def test_pages_run_oldest_first_and_end_with_a_null_cursor(client, sender, reviewer):
    ids = [hand(client, sender, f"s{n}") for n in range(5)]
    first = page(client, reviewer, limit=2)
    assert [h["handoff_id"] for h in first["handoffs"]] == ids[:2]
    assert isinstance(first["next_cursor"], str)
    second = page(client, reviewer, limit=2, cursor=first["next_cursor"])
    assert [h["handoff_id"] for h in second["handoffs"]] == ids[2:4]
    last = page(client, reviewer, limit=2, cursor=second["next_cursor"])
    assert [h["handoff_id"] for h in last["handoffs"]] == ids[4:]
    assert last["next_cursor"] is None
    assert read_all(client, reviewer, limit=5) == ids
    assert page(client, reviewer, limit=5)["next_cursor"] is None


def test_default_limit_is_50_and_at_most_500_may_be_asked(client, services, sender, reviewer):
    ids = [hand(client, sender, f"s{n}") for n in range(51)]
    first = page(client, reviewer)
    assert [h["handoff_id"] for h in first["handoffs"]] == ids[:50]
    rest = page(client, reviewer, cursor=first["next_cursor"])
    assert [h["handoff_id"] for h in rest["handoffs"]] == ids[50:]
    assert rest["next_cursor"] is None
    assert len(page(client, reviewer, limit=500)["handoffs"]) == 51
    assert len(page(client, reviewer, limit=1)["handoffs"]) == 1


def test_resolving_while_paging_neither_skips_nor_repeats(client, sender, reviewer):
    ids = [hand(client, sender, f"s{n}") for n in range(6)]
    first = page(client, reviewer, limit=3)
    for handoff_id in (ids[0], ids[4]):  # one already read, one not yet
        resolved = client.simulate_post(
            f"/v1/handoffs/{handoff_id}/resolve",
            json={"status": "accepted"},
            headers=bearer(reviewer),
        )
        assert resolved.status_code == 200
    rest = page(client, reviewer, limit=3, cursor=first["next_cursor"])
    assert [h["handoff_id"] for h in rest["handoffs"]] == [ids[3], ids[5]]


def test_subject_filter_pages_too(client, sender, reviewer):
    ids = {s: [hand(client, sender, s) for _ in range(3)] for s in ("user_rama", "user_other")}
    assert read_all(client, reviewer, limit=2, subject_id="user_rama") == ids["user_rama"]
    assert read_all(client, reviewer, limit=1, subject_id="user_other") == ids["user_other"]
    assert page(client, reviewer, subject_id="nobody") == {"handoffs": [], "next_cursor": None}


def test_each_recipient_pages_its_own_inbox(client, key, sender, reviewer):
    other = key("acme", "agent_other")
    mine = []
    theirs = []
    for n in range(4):
        mine.append(hand(client, sender, f"s{n}"))
        theirs.append(hand(client, sender, f"s{n}", to="agent_other"))
    assert read_all(client, reviewer, limit=3) == mine
    assert read_all(client, other, limit=3) == theirs


def test_paging_stays_exact_while_handoffs_arrive(client, key, reviewer):
    """Writers keep adding while a reader pages through again and again: every pass is a
    prefix of the final inbox, so nothing was skipped, repeated or reordered."""
    senders = [key("acme", f"agent_writer_{n}") for n in range(3)]
    for n in range(20):
        hand(client, senders[n % 3], f"before-{n}")
    before = read_all(client, reviewer, limit=500)
    start = threading.Barrier(len(senders) + 1)
    errors: list[BaseException] = []

    def write(sender: str, n: int) -> None:
        try:
            start.wait()
            for i in range(15):
                hand(client, sender, f"during-{n}-{i}")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(s, n)) for n, s in enumerate(senders)]
    for writer in writers:
        writer.start()
    start.wait()
    passes = []
    while any(writer.is_alive() for writer in writers):
        passes.append(read_all(client, reviewer, limit=3))
    for writer in writers:
        writer.join()
    assert not errors
    final = read_all(client, reviewer, limit=500)
    assert len(final) == len(set(final)) == 20 + 3 * 15
    assert final[:20] == before
    assert passes
    for seen in passes:
        assert len(seen) == len(set(seen)), "a handoff was repeated"
        assert seen == final[: len(seen)], "a handoff was skipped or reordered"
        assert len(seen) >= 20
    assert [len(seen) for seen in passes] == sorted(len(seen) for seen in passes)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": "0"}, "limit must be an integer from 1 to 500."),
        ({"limit": "501"}, "limit must be an integer from 1 to 500."),
        ({"limit": "-1"}, "limit must be an integer from 1 to 500."),
        ({"limit": "1.5"}, "limit must be an integer from 1 to 500."),
        ({"limit": "ten"}, "limit must be an integer from 1 to 500."),
        ({"limit": ""}, "limit must be an integer from 1 to 500."),
        ({"limit": "00000000000000000000005"}, "limit must be an integer from 1 to 500."),
        ({"limit": ["1", "2"]}, "limit must be given once."),
        ({"cursor": "x"}, "cursor is not valid: pass next_cursor from the previous page."),
        ({"cursor": ""}, "cursor is not valid: pass next_cursor from the previous page."),
        (
            {"cursor": "eyJ2IjoxLCJhZnRlciI6LTF9"},
            "cursor is not valid: pass next_cursor from the previous page.",
        ),  # {"v":1,"after":-1}
        (
            {"cursor": "eyJhZnRlciI6MX0"},
            "cursor is not valid: pass next_cursor from the previous page.",
        ),  # {"after":1}
        ({"subject_id": ""}, "subject_id must not be empty."),
        ({"subject_id": "x" * 201}, "subject_id must be at most 200 characters."),
        ({"subject_id": "a\tb"}, "subject_id must not contain control characters."),
        ({"status": "pending"}, "Unknown query parameter: status."),
    ],
)
def test_bad_paging_input_is_400(client, sender, reviewer, params, message):
    hand(client, sender, "s")
    result = client.simulate_get("/v1/handoffs", params=params, headers=bearer(reviewer))
    assert result.status_code == 400
    assert result.json == {"error": {"code": "VALIDATION_ERROR", "message": message}}


def test_a_tampered_cursor_is_400(client, sender, reviewer):
    for n in range(3):
        hand(client, sender, f"s{n}")
    cursor = page(client, reviewer, limit=1)["next_cursor"]
    for tampered in (cursor[:-1], cursor + "A", cursor.lower(), cursor + "=="):
        result = client.simulate_get(
            "/v1/handoffs", params={"cursor": tampered}, headers=bearer(reviewer)
        )
        assert result.status_code == 400, tampered
