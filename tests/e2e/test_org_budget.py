"""`titen serve --org-rate`: each organization's request budget, counted by all the workers of
a node, against real servers on both backends; the buckets shared by forked processes."""

from __future__ import annotations

import json
import multiprocessing
import re
import threading
import time
from http import client

import pytest

from tests.support import Http, Server, create_key, titen
from titen.service.budget import BURST_SECONDS, OrgBudget

RATE = 5
BURST = RATE * BURST_SECONDS
pytestmark = pytest.mark.server("--org-rate", str(RATE), "--workers", "2")


def answer(http: Http, path: str = "/v1/handoffs") -> tuple[int, dict[str, str], dict | None]:
    """Status, headers and body of one GET, on a connection of its own."""
    connection = client.HTTPConnection(http.host, http.port, timeout=30)
    try:
        connection.request("GET", path, headers={"authorization": f"Bearer {http.key}"})
        response = connection.getresponse()
        body = response.read()
        headers = {name.lower(): value for name, value in response.getheaders()}
    finally:
        connection.close()
    return response.status, headers, json.loads(body) if body else None


def test_an_organization_past_its_budget_is_answered_429_and_another_is_not(server: Server):
    flooding = Http(server.url, create_key(server.database, "acme", "agent_flood"))
    other = Http(server.url, create_key(server.database, "umbra", "agent_calm"))
    began = time.monotonic()
    statuses = []
    refused = None
    for _ in range(4 * BURST):
        status, headers, body = answer(flooding)
        statuses.append(status)
        if status == 429 and refused is None:
            refused = (headers, body)
    elapsed = time.monotonic() - began
    assert set(statuses) == {200, 429}
    # Counted across both workers: never more than the burst and what the rate refilled.
    assert statuses.count(200) <= BURST + RATE * elapsed + 1
    assert refused is not None
    headers, body = refused
    assert body["error"]["code"] == "TOO_MANY_REQUESTS"
    assert "request budget" in body["error"]["message"]
    retry = int(headers["retry-after"])
    assert 1 <= retry <= 1 + 1 / RATE
    assert headers["ratelimit-policy"] == f'"org";q={BURST};w={BURST_SECONDS}'
    assert re.fullmatch(rf'"org";r=0;t={retry}', headers["ratelimit"])
    # The other organization spends its own budget: none of its requests is refused.
    for _ in range(BURST // 2):
        status, headers, _ = answer(other)
        assert status == 200 and "ratelimit" not in headers


def test_no_budget_with_org_rate_0_and_a_bad_rate_stops_the_server(database: str):
    server = Server(database, 8, "--org-rate", "0")
    try:
        http = Http(server.url, create_key(database, "acme", "agent_a"))
        assert {answer(http)[0] for _ in range(30)} == {200}
    finally:
        server.stop()
    for bad in ("-1", "many", "inf", "nan"):
        refused = titen("serve", "--org-rate", bad, database=database, check=False)
        assert refused.returncode == 2
        assert f"{bad!r} is not a rate" in refused.stderr


def _spend(budget: OrgBudget, organization: str, count: int, allowed) -> None:
    allowed.put(sum(budget.wait(organization) == 0 for _ in range(count)))


def test_forked_processes_spend_one_bucket_per_organization(tmp_path):
    # A burst of 1, refilled in 100 s, shared by the processes forked from this one.
    budget = OrgBudget(rate=0.01, lock_path=str(tmp_path / "org-budget"), slots=64)
    assert budget.policy.burst == 1
    fork = multiprocessing.get_context("fork")
    allowed = fork.Queue()
    children = [fork.Process(target=_spend, args=(budget, "acme", 5, allowed)) for _ in range(3)]
    for child in children:
        child.start()
    for child in children:
        child.join()
    assert sum(allowed.get() for _ in children) == 1  # one bucket, not one per process
    assert 0 < budget.wait("acme") <= 100
    assert budget.wait("umbra") == 0


def _hammer(budget: OrgBudget, until: float, allowed) -> None:
    counts = []

    def spend() -> None:
        counts.append(
            sum(budget.wait("acme") == 0 for _ in iter(lambda: time.time() < until, False))
        )

    threads = [threading.Thread(target=spend) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    allowed.put(sum(counts))


def test_processes_and_threads_at_once_spend_no_more_than_the_burst_and_the_rate(tmp_path):
    budget = OrgBudget(rate=50, lock_path=str(tmp_path / "org-budget"), slots=64)
    fork = multiprocessing.get_context("fork")
    allowed = fork.Queue()
    began = time.time()
    until = began + 1.5
    children = [fork.Process(target=_hammer, args=(budget, until, allowed)) for _ in range(3)]
    for child in children:
        child.start()
    total = sum(allowed.get() for _ in children)
    for child in children:
        child.join()
    elapsed = time.time() - began
    assert budget.policy.burst <= total <= budget.policy.burst + 50 * elapsed + 1


def test_a_process_of_its_own_spends_its_own_buckets():
    budget = OrgBudget(rate=0.01, slots=64)  # no lock file: this process's buckets only
    fork = multiprocessing.get_context("fork")
    allowed = fork.Queue()
    child = fork.Process(target=_spend, args=(budget, "acme", 5, allowed))
    child.start()
    child.join()
    assert allowed.get() == 1
    assert budget.wait("acme") == 0  # the child spent its copy's token, not this process's
    assert budget.wait("acme") > 0


@pytest.mark.parametrize("shared", [False, True], ids=["one process", "shared"])
def test_a_full_table_gives_the_stalest_slot_to_a_new_organization(tmp_path, shared):
    lock = str(tmp_path / "org-budget") if shared else None
    budget = OrgBudget(rate=0.01, lock_path=lock, slots=4)
    for n in range(4):
        assert budget.wait(f"org{n}") == 0
    assert budget.wait("org0") > 0  # used again: org1 is now the one unused longest
    assert budget.wait("newcomer") == 0  # took over a slot
    assert budget.wait("newcomer") > 0
    assert budget.wait("org0") > 0  # kept its spent bucket
