"""What the cluster tests share: a load of clients against real nodes, recording what they were
told, and the store read back for the history check (tests/cluster/history.py)."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from collections import Counter
from datetime import datetime
from urllib.parse import parse_qsl, urlencode

import psycopg

from tests.cluster.history import Ack, Acks, Store, Term
from tests.support import Http, create_key

ORG = "acme"
RESOURCE_TYPE = "deploy"


def answer(
    base_url: str, method: str, path: str, key: str, body: object = None, headers=None
) -> tuple[int, dict[str, str], dict | None]:  # type: ignore[no-untyped-def]
    """One request over real HTTP: the status, the headers (lowercase names) and the JSON."""
    host, _, port = base_url.removeprefix("http://").partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    sent = {"authorization": f"Bearer {key}", **(headers or {})}
    data = None
    if body is not None:
        data = json.dumps(body)
        sent["content-type"] = "application/json"
    try:
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    found = {name.lower(): value for name, value in response.getheaders()}
    return response.status, found, json.loads(raw) if raw else None


def lease(resource: str, ttl: int = 30) -> dict:
    return {
        "resource_type": RESOURCE_TYPE,
        "resource_id": resource,
        "purpose": "p",
        "ttl_seconds": ttl,
    }


class Load:
    """Client threads acquiring, releasing and handing off resources across the nodes until
    stopped; every 2xx is recorded as an Ack, anything else (503s, cut connections) is not."""

    def __init__(self, urls: list[str], keys: list[str], principals: list[str], resources: int):
        self.urls, self.keys, self.principals = urls, keys, principals
        self.resources = [f"r{i}" for i in range(resources)]
        self.acks = Acks()
        self.statuses: Counter[int] = Counter()
        """Every answer's status (a 500 is a defect whatever else happened)."""
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(len(keys))
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def count(self) -> int:
        return len(self.acks.items)

    def _client(self, index: int) -> None:
        key = self.keys[index]
        peer = self.principals[(index + 1) % len(self.principals)]
        for step in itertools.count():
            if self._stop.is_set():
                return
            url = self.urls[(index + step) % len(self.urls)]
            resource = self.resources[(index + step) % len(self.resources)]
            try:
                self._round(url, key, resource, peer, step)
            except OSError as exc:  # a node restarting, a cut: not acknowledged
                self.failures.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.05)

    def _round(self, url: str, key: str, resource: str, peer: str, step: int) -> None:
        status, _, body = answer(url, "POST", "/v1/leases", key, lease(resource))
        self.statuses[status] += 1
        if status != 201:
            time.sleep(0.02)
            return
        lease_id = body["data"]["lease_id"]  # type: ignore[index]
        self.acks.add(Ack("acquire", lease_id, body["data"]["fencing_token"]))  # type: ignore[index]
        if step % 3 == 0:
            status, _, body = answer(
                url, "POST", "/v1/handoffs", key, {"to_principal": peer, "subject_id": resource}
            )
            self.statuses[status] += 1
            if status == 201:
                self.acks.add(Ack("handoff", body["data"]["handoff_id"]))  # type: ignore[index]
        status, _, _ = answer(url, "DELETE", f"/v1/leases/{lease_id}", key)
        self.statuses[status] += 1
        if status == 200:
            self.acks.add(Ack("release", lease_id))


def principals_and_keys(database: str, count: int) -> tuple[list[str], list[str], str]:
    """`count` agents of ORG with their keys, and an operator key (for the audit)."""
    principals = [f"agent_{i}" for i in range(count)]
    keys = [create_key(database, ORG, principal) for principal in principals]
    return principals, keys, create_key(database, ORG, "ops", role="operator")


def read_store(url: str, operator_key: str, resources: list[str], database: str) -> Store:
    """The store as it is now: each resource's terms (the audit), the handoffs created (the
    event log) and the events table's positions (read from `database`, a titen URL)."""
    http = Http(url, operator_key)
    terms = {resource: _terms(http, resource) for resource in resources}
    handoffs: list[str] = []
    cursor = ""
    while True:
        status, page = http.request("GET", f"/v1/events?types=handoff.created&limit=500{cursor}")
        assert status == 200, page
        events = page["data"]["events"]  # type: ignore[index]
        handoffs += [event["data"]["handoff_id"] for event in events]
        if not events:
            break
        cursor = f"&after={page['data']['next_cursor']}"  # type: ignore[index]
    base, _, query = database.partition("?")
    params = dict(parse_qsl(query))
    table = f'"{params.pop("schema", "public")}".titen_events'
    with psycopg.connect(base + "?" + urlencode(params), autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT originator_id, notification_id FROM {table}"
            " ORDER BY originator_id, originator_version"
        ).fetchall()
    by_aggregate: dict[object, list[int]] = {}
    for aggregate, position in rows:
        by_aggregate.setdefault(aggregate, []).append(position)
    return Store(terms, handoffs, list(by_aggregate.values()))


def _terms(http: Http, resource: str) -> list[Term]:
    found: list[Term] = []
    cursor = ""
    while True:
        status, page = http.request(
            "GET",
            f"/v1/audit/leases?resource_type={RESOURCE_TYPE}&resource_id={resource}"
            f"&limit=500{cursor}",
        )
        assert status == 200, page
        data = page["data"]  # type: ignore[index]
        found += [
            Term(
                resource,
                term["lease_id"],
                term["fencing_token"],
                _instant(term["acquired_at"]),
                _instant(term["expires_at"]),
                _instant(term["released_at"]) if term["released_at"] else None,
            )
            for term in data["terms"]
        ]
        if not data["next_cursor"]:
            return found
        cursor = f"&cursor={data['next_cursor']}"


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
