"""A PostgreSQL outage seen by a real server: 503 UNAVAILABLE with Retry-After, never 500, and
recovery without a restart once the database answers again.

The shared PostgreSQL server is never stopped (others use it): the server under test reaches it
through a TCP proxy on loopback (tests/tcp_proxy.py), and the test cuts and restores the proxy.
"""

from __future__ import annotations

import http.client
import json
import threading

from tests.support import Server, create_key, eventually, free_port, subscriptions_held

LEASE = {"purpose": "p", "ttl_seconds": 60, "resource_type": "deploy"}


def call(server: Server, key: str, method: str, path: str, body: object = None):
    """Status, headers and JSON body of one request over a real connection."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        headers = {"authorization": f"Bearer {key}"}
        payload = None
        if body is not None:
            payload = json.dumps(body)
            headers["content-type"] = "application/json"
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        conn.close()


def test_an_outage_answers_503_and_the_server_recovers_by_itself(postgres_database, proxied):
    proxy, through_proxy = proxied
    alice = create_key(postgres_database, "acme", "agent_alice")
    bob = create_key(postgres_database, "acme", "agent_bob")
    server = Server(through_proxy, 4, "--metrics-port", str(free_port()))
    try:
        status, _, _ = call(server, alice, "POST", "/v1/leases", {**LEASE, "resource_id": "a"})
        assert status == 201
        _, _, page = call(server, alice, "GET", "/v1/events?limit=500")
        before = page["data"]["events"]

        proxy.cut()
        for method, path, body in [
            ("POST", "/v1/leases", {**LEASE, "resource_id": "during"}),
            ("GET", "/v1/handoffs", None),
            ("POST", "/v1/handoffs", {"to_principal": "agent_bob", "subject_id": "s"}),
            ("GET", "/v1/events?after=latest&wait=2", None),
        ]:
            status, headers, answer = call(server, alice, method, path, body)
            assert status == 503, (method, path, answer)
            assert answer["error"]["code"] == "UNAVAILABLE"
            assert headers["Retry-After"] == "2"
        assert call(server, alice, "GET", "/healthz")[0] == 200  # the process itself is up

        proxy.restore()
        eventually(
            lambda: call(server, alice, "GET", "/v1/handoffs")[0] == 200,
            "the inbox answers again",
            timeout=30,
        )
        woken: list[dict] = []
        waiting = threading.Thread(
            target=lambda: woken.append(
                call(server, bob, "GET", "/v1/events?after=latest&wait=20")[2]
            )
        )
        waiting.start()
        eventually(lambda: subscriptions_held(server) == 1, "the long-poll waiting")
        status, _, created = call(
            server, alice, "POST", "/v1/handoffs", {"to_principal": "agent_bob", "subject_id": "s"}
        )
        assert status == 201
        waiting.join(30)
        assert [e["data"]["handoff_id"] for e in woken[0]["data"]["events"]] == [
            created["data"]["handoff_id"]
        ]
        status, _, _ = call(server, alice, "POST", "/v1/leases", {**LEASE, "resource_id": "during"})
        assert status == 201
        _, _, page = call(server, alice, "GET", "/v1/events?limit=500")
        after = page["data"]["events"]
        # What was refused during the outage left nothing behind.
        assert [e["type"] for e in after[len(before) :]] == ["handoff.created", "lease.acquired"]
    finally:
        server.stop()
    assert '"status": 500' not in server.log
