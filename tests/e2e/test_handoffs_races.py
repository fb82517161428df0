"""Accept and reject at once: exactly one wins, the other is 404, one resolution is recorded.

Threads in one process on both backends, and two `titen serve` processes on PostgreSQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from tests.support import Http, Server, bearer
from titen.domain.ids import HANDOFF, to_uuid
from titen.service.bootstrap import bootstrap

ROUNDS = 8


def both_at_once(accept: Callable[[], int], reject: Callable[[], int]) -> dict[str, int]:
    """Run the two resolves from two threads released together; their statuses by name."""
    start = threading.Barrier(2)
    statuses: dict[str, int] = {}

    def run(name: str, call: Callable[[], int]) -> None:
        start.wait()
        statuses[name] = call()

    threads = [
        threading.Thread(target=run, args=("accepted", accept)),
        threading.Thread(target=run, args=("rejected", reject)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def check_one_winner(statuses: dict[str, int], history: list[str]) -> str:
    assert sorted(statuses.values()) == [200, 404], statuses
    winner = next(name for name, status in statuses.items() if status == 200)
    assert history == ["Created", winner.capitalize()]
    return winner


def history_of(app, handoff_id: str) -> list[str]:
    return [type(e).__name__ for e in app.events.get(to_uuid(HANDOFF, handoff_id))]


def test_threads_race_to_resolve(client, services, key):
    sender = key("acme", "agent_sender")
    reviewer = key("acme", "agent_reviewer")
    for n in range(ROUNDS):
        created = client.simulate_post(
            "/v1/handoffs",
            json={"to_principal": "agent_reviewer", "subject_id": f"s{n}"},
            headers=bearer(sender),
        )
        handoff_id = created.json["data"]["handoff_id"]
        path = f"/v1/handoffs/{handoff_id}/resolve"

        def call(status: str, path: str = path) -> int:
            return client.simulate_post(
                path, json={"status": status}, headers=bearer(reviewer)
            ).status_code

        statuses = both_at_once(lambda: call("accepted"), lambda: call("rejected"))
        winner = check_one_winner(statuses, history_of(services.app, handoff_id))
        shown = client.simulate_get(f"/v1/handoffs/{handoff_id}", headers=bearer(sender))
        assert shown.json["data"]["status"] == winner
    inbox = client.simulate_get("/v1/handoffs", headers=bearer(reviewer)).json["data"]
    assert inbox["handoffs"] == []


@pytest.fixture
def two_servers(postgres_database: str, serve: Callable[..., Server]) -> tuple[Server, Server]:
    return serve(postgres_database), serve(postgres_database)


def test_two_processes_race_to_resolve(postgres_database, two_servers):
    services = bootstrap(postgres_database, pool_size=2)
    try:
        sender = services.keys.create("acme", "agent_sender", "agent")
        reviewer = services.keys.create("acme", "agent_reviewer", "agent")
        first, second = two_servers
        ids = []
        for n in range(ROUNDS):
            status, body = Http(first.url, sender).request(
                "POST", "/v1/handoffs", {"to_principal": "agent_reviewer", "subject_id": f"s{n}"}
            )
            assert status == 201
            ids.append(body["data"]["handoff_id"])
        for n, handoff_id in enumerate(ids):
            # Alternate which process accepts, so each kind of win happens in each process.
            accepting, rejecting = (first, second) if n % 2 else (second, first)
            path = f"/v1/handoffs/{handoff_id}/resolve"
            statuses = both_at_once(
                lambda a=accepting, p=path: Http(a.url, reviewer).request(
                    "POST", p, {"status": "accepted"}
                )[0],
                lambda r=rejecting, p=path: Http(r.url, reviewer).request(
                    "POST", p, {"status": "rejected"}
                )[0],
            )
            winner = check_one_winner(statuses, history_of(services.app, handoff_id))
            for server in (first, second):
                status, body = Http(server.url, sender).request("GET", f"/v1/handoffs/{handoff_id}")
                assert (status, body["data"]["status"]) == (200, winner)
        for server in (first, second):
            status, body = Http(server.url, reviewer).request("GET", "/v1/handoffs")
            assert (status, body["data"]["handoffs"]) == (200, [])
    finally:
        services.close()
