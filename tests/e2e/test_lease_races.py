"""Mutual exclusion under real concurrency: threads, and two server processes on PostgreSQL."""

from __future__ import annotations

import threading
import time

from tests.support import Http, Server
from titen.service.bootstrap import bootstrap

RESOURCE = {"resource_type": "deploy", "resource_id": "checkout", "purpose": "p", "ttl_seconds": 60}
# Small pages: the operator's view of the newest term crosses pages in every run.
AUDIT = "/v1/audit/leases?resource_type=deploy&resource_id=checkout&limit=10"


def make_keys(database: str, count: int) -> list[str]:
    services = bootstrap(database, pool_size=2)
    try:
        return [services.keys.create("acme", f"agent_{n}", "agent") for n in range(count)]
    finally:
        services.close()


def test_simultaneous_acquires_have_exactly_one_winner(server):
    keys = make_keys(server.database, 12)
    start = threading.Barrier(len(keys))
    results: list[tuple[int, dict]] = []

    def contend(key: str) -> None:
        http = Http(server.url, key)
        start.wait()
        results.append(http.request("POST", "/v1/leases", RESOURCE))

    threads = [threading.Thread(target=contend, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(status for status, _ in results)
    assert statuses == [201] + [409] * (len(keys) - 1)
    expiry = next(body["data"]["expires_at"] for status, body in results if status == 201)
    for status, body in results:
        if status == 409:
            assert body["error"]["message"].endswith(f"until {expiry}.")


def hold_and_release_in_turns(urls: list[str], database: str, rounds: int) -> None:
    """Several principals loop acquire→release on one resource through the given servers.

    Each holder's time between receiving its 201 and sending its release is a moment it
    certainly held the lease; no other holder may receive a 201 inside that window. A
    sampler also watches the unreleased-lease index for two rows at once.
    """
    keys = make_keys(database, 6)
    holds: list[tuple[float, float, str]] = []
    granted: list[tuple[float, str]] = []
    lock = threading.Lock()
    done = threading.Event()
    most_rows = [0]
    refused = [0]
    unexpected: list[tuple[int, dict]] = []  # asserted after the run, so each shows its body

    def agent(n: int, key: str) -> None:
        http = Http(urls[n % len(urls)], key)
        for _ in range(rounds):
            status, body = http.request("POST", "/v1/leases", RESOURCE)
            got = time.monotonic()
            if status == 201:
                with lock:
                    granted.append((got, key))
                time.sleep(0.005)  # hold it for a while: others keep trying meanwhile
                let_go = time.monotonic()
                released = http.request("DELETE", f"/v1/leases/{body['data']['lease_id']}")
                with lock:
                    holds.append((got, let_go, key))
                    if released[0] != 200:
                        unexpected.append(released)
            else:
                with lock:
                    refused[0] += 1
                    if status != 409:
                        unexpected.append((status, body))

    def sample() -> None:
        services = bootstrap(database, pool_size=2)
        try:
            while not done.is_set():
                rows = services.store.query(
                    "SELECT COUNT(*) AS n FROM {lease_index} WHERE resource_id = %s",
                    ["checkout"],
                )
                most_rows[0] = max(most_rows[0], rows[0]["n"])
        finally:
            services.close()

    sampler = threading.Thread(target=sample)
    sampler.start()
    agents = [threading.Thread(target=agent, args=(n, key)) for n, key in enumerate(keys)]
    for thread in agents:
        thread.start()
    for thread in agents:
        thread.join()
    done.set()
    sampler.join()

    assert not unexpected, unexpected
    assert len(holds) >= 5 and refused[0] >= 5, "too little contention to prove anything"
    for start, end, holder in holds:
        inside = [key for at, key in granted if start < at < end and key != holder]
        assert not inside, f"{inside} were granted the lease while {holder} held it"
    assert most_rows[0] <= 1


def test_no_two_holders_at_once_with_threads(server):
    hold_and_release_in_turns([server.url], server.database, rounds=25)


def test_no_two_holders_at_once_across_two_server_processes(postgres_database):
    servers = [Server(postgres_database), Server(postgres_database)]
    try:
        hold_and_release_in_turns([s.url for s in servers], postgres_database, rounds=25)
    finally:
        for server in servers:
            server.stop()
    services = bootstrap(postgres_database, pool_size=2)
    try:
        live = services.lease_index.rows()
        services.projector.rebuild("lease_index")
        assert services.lease_index.rows() == live
    finally:
        services.close()


ENDINGS = {"superseded", "replaced_after_expiry", "released", "released_by_operator"}


def test_fencing_tokens_never_repeat_and_rise_in_commit_order_across_two_processes(database):
    """Agents on two servers sharing one store (a SQLite file, a PostgreSQL schema) race for one
    resource: they re-acquire, release, and an operator releases whatever another agent holds,
    after a first holder "crashed" (never releases) with a 10 s TTL, so the race also crosses an
    expiry. Every 201 carries a token no other 201 had,
    and the audited history, in commit order, numbers its terms 1..N with exactly those tokens.

    The race runs until the audit shows every way a term ends, not for a fixed time: how many
    rounds fit in a few seconds depends on the machine's load, and a releasing agent only wins
    the lease after the operator took it from one that keeps it.
    """
    keys = make_keys(database, 6)
    servers = [Server(database), Server(database)]
    granted: list[tuple[str, int, str]] = []  # (lease_id, token, holder's key), as received
    unexpected: list[tuple[int, dict | None]] = []
    lock = threading.Lock()
    enough = threading.Event()  # the audit holds every ending and 20 terms: the race may stop

    def racing(cap: float) -> bool:
        return not enough.is_set() and time.monotonic() < cap

    def agent(n: int, key: str, cap: float) -> None:
        http = Http(servers[n % 2].url, key)
        while racing(cap):
            status, body = http.request("POST", "/v1/leases", RESOURCE)
            if status == 409:
                time.sleep(0.002)
                continue
            if status != 201:
                with lock:
                    unexpected.append((status, body))
                continue
            lease_id, token = body["data"]["lease_id"], body["data"]["fencing_token"]
            with lock:
                granted.append((lease_id, token, key))
            checked = http.request("GET", f"/v1/leases/{lease_id}")
            if checked[0] == 200 and checked[1]["data"]["fencing_token"] != token:
                with lock:
                    unexpected.append(checked)
            if n % 3 == 0:
                continue  # keep it: the next round re-acquires (supersedes) it
            released = http.request("DELETE", f"/v1/leases/{lease_id}")
            if released[0] not in (200, 404):  # 404: the operator released it meanwhile
                with lock:
                    unexpected.append(released)

    def operator(cap: float) -> None:
        http = Http(servers[1].url, make_operator(database))
        history = AuditTail(http)
        while racing(cap):
            terms = history.read()
            if terms and terms[-1]["ended"] is None and terms[-1]["holder"] != "agent_0":
                http.request("DELETE", f"/v1/leases/{terms[-1]['lease_id']}")
            if {t["ended"] for t in terms} >= ENDINGS and len(terms) >= 20:
                enough.set()
            enough.wait(0.05)
        if history.failed:
            with lock:
                unexpected.append(history.failed)

    try:
        status, body = Http(servers[0].url, keys[0]).request(
            "POST", "/v1/leases", {**RESOURCE, "ttl_seconds": 10}
        )  # its holder "crashes": the lease is only ever replaced after its expiry
        assert status == 201
        granted.append((body["data"]["lease_id"], body["data"]["fencing_token"], keys[0]))
        cap = time.monotonic() + 120  # a bound for a broken run, not a pace: `enough` ends it
        threads = [
            threading.Thread(target=agent, args=(n, key, cap)) for n, key in enumerate(keys[1:])
        ]
        threads.append(threading.Thread(target=operator, args=(cap,)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for server in servers:
            server.stop()

    assert not unexpected, unexpected
    tokens = [token for _, token, _ in granted]
    assert len(tokens) == len(set(tokens)), "two leases of one resource shared a token"
    assert len(tokens) >= 20, "too little contention to prove anything"
    services = bootstrap(database, pool_size=2)
    try:
        terms = services.auditor.every_term("acme", "deploy", "checkout", None)["terms"]
    finally:
        services.close()
    assert [t["fencing_token"] for t in terms] == list(range(1, len(terms) + 1))
    assert {t["lease_id"]: t["fencing_token"] for t in terms} == {
        lease_id: token for lease_id, token, _ in granted
    }
    assert {t["ended"] for t in terms} >= ENDINGS
    for key in keys:  # each agent's own tokens rise in the order it received them
        own = [token for _, token, holder in granted if holder == key]
        assert own == sorted(own)


class AuditTail:
    """Every term on the resource, newest last, read as the audit pages it.

    Each read fetches the pages from the last one read before: only the newest term can still
    change, and a term on a page already passed has ended. Reading page one alone would stop
    showing the newest term once the resource has more terms than one page holds.
    """

    def __init__(self, http: Http):
        self.http = http
        self.passed: list[dict] = []  # the terms on full pages already passed
        self.cursor = ""  # the cursor of the page after them ("" for the first)
        self.failed: tuple[int, dict | None] | None = None

    def read(self) -> list[dict]:
        while True:
            status, body = self.http.request(
                "GET", AUDIT + (f"&cursor={self.cursor}" if self.cursor else "")
            )
            if status != 200:
                self.failed = (status, body)
                return self.passed
            page = body["data"]["terms"]
            if body["data"]["next_cursor"] is None:
                return self.passed + page
            self.passed += page
            self.cursor = body["data"]["next_cursor"]


def make_operator(database: str) -> str:
    services = bootstrap(database, pool_size=2)
    try:
        return services.keys.create("acme", "ops", "operator")
    finally:
        services.close()
