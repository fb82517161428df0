"""The client retries a call whose answer was lost, safely: the service runs it once.

A proxy between the client and a real server forwards each request but, for the first one it
sees of a kind, drops the connection before the answer reaches the client (as a timeout or a
broken network would). The client sends the call again with the same Idempotency-Key and gets
the first answer; the service recorded one event.
"""

from __future__ import annotations

import socket
import threading

import pytest

from tests.e2e.test_mcp import mcp_session, run, text
from tests.support import Http, create_key, read_http_request
from titen.client import TitenClient, Unreachable


class DroppingProxy:
    """Forwards whole HTTP exchanges to `target`, dropping the answers to the first `drops`
    requests that start with `prefix` (after the server has handled them)."""

    def __init__(self, target_port: int, prefix: bytes, drops: int = 1):
        self.target_port = target_port
        self.prefix = prefix
        self.drops = drops
        self.forwarded: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._exchange, args=(client,), daemon=True).start()

    def _exchange(self, client: socket.socket) -> None:
        with client, socket.create_connection(("127.0.0.1", self.target_port)) as server:
            request = _read_request(client)
            self.forwarded.append(request)
            server.sendall(request)
            answer = _read_all(server)
            if request.startswith(self.prefix) and self.drops > 0:
                self.drops -= 1
                # The server did the work; the client hears nothing of it, or `instead`.
                client.sendall(self.instead)
                return
            client.sendall(answer)

    instead = b""
    """What a dropped exchange answers instead of the server's answer (nothing, by default)."""

    def close(self) -> None:
        self._listener.close()


def _read_request(sock: socket.socket) -> bytes:
    head, body = read_http_request(sock)
    # One exchange per connection, so the server closes after answering.
    head = b"\r\n".join(
        line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")
    )
    return head + b"\r\nConnection: close\r\n\r\n" + body


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def keys_sent(proxy: DroppingProxy) -> list[bytes]:
    return [
        line.split(b":", 1)[1].strip()
        for request in proxy.forwarded
        for line in request.split(b"\r\n")
        if line.lower().startswith(b"idempotency-key:")
    ]


def test_a_lost_acquire_answer_is_retried_and_answered_once(server):
    alice = create_key(server.database, "acme", "agent_alice")
    proxy = DroppingProxy(server.port, b"POST /v1/leases")
    try:
        with TitenClient(proxy.url, alice) as client:
            lease = client.acquire_lease("deploy", "svc", purpose="p", ttl_seconds=60)
            assert client.get_lease(lease.lease_id).fencing_token == lease.fencing_token == 1
    finally:
        proxy.close()
    sent = keys_sent(proxy)
    assert len(sent) == 2 and sent[0] == sent[1]  # one call, one key, two attempts
    events = Http(server.url, alice).request("GET", "/v1/events?types=lease.acquired")[1]
    assert len(events["data"]["events"]) == 1  # the retry did not supersede the first lease


def test_a_lost_handoff_answer_is_retried_without_a_second_handoff(server):
    alice = create_key(server.database, "acme", "agent_alice")
    bob = create_key(server.database, "acme", "agent_bob")
    proxy = DroppingProxy(server.port, b"POST /v1/handoffs")
    try:
        with TitenClient(proxy.url, alice) as client:
            created = client.create_handoff("agent_bob", "subject")
            again = client.create_handoff("agent_bob", "subject")  # a new call: a new key
    finally:
        proxy.close()
    assert created.handoff_id != again.handoff_id
    inbox = Http(server.url, bob).request("GET", "/v1/handoffs")[1]["data"]["handoffs"]
    assert [h["handoff_id"] for h in inbox] == [created.handoff_id, again.handoff_id]
    sent = keys_sent(proxy)
    assert len(sent) == 3 and sent[0] == sent[1] != sent[2]


UNKNOWN = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 2\r\nConnection: close\r\nContent-Length: 61\r\n\r\n"
    b'{"error": {"code": "OUTCOME_UNKNOWN", "message": "unknown."}}'
)


def test_an_outcome_unknown_is_retried_with_its_key_and_learns_the_first_answer(server):
    alice = create_key(server.database, "acme", "agent_alice")
    proxy = DroppingProxy(server.port, b"POST /v1/leases")
    proxy.instead = UNKNOWN
    try:
        with TitenClient(proxy.url, alice) as client:
            lease = client.acquire_lease("deploy", "svc", purpose="p", ttl_seconds=60)
            assert client.get_lease(lease.lease_id).fencing_token == lease.fencing_token == 1
    finally:
        proxy.close()
    sent = keys_sent(proxy)
    assert len(sent) == 2 and sent[0] == sent[1]
    events = Http(server.url, alice).request("GET", "/v1/events?types=lease.acquired")[1]
    assert len(events["data"]["events"]) == 1


def test_retries_are_bounded(server):
    alice = create_key(server.database, "acme", "agent_alice")
    proxy = DroppingProxy(server.port, b"GET /v1/handoffs", drops=10)
    try:
        with (
            TitenClient(proxy.url, alice, retries=2) as client,
            pytest.raises(Unreachable) as lost,
        ):
            client.inbox()
    finally:
        proxy.close()
    assert lost.value.sent
    assert len(proxy.forwarded) == 3  # the call and two retries


def test_an_mcp_tool_call_is_one_call_retried_with_its_key(server):
    alice = create_key(server.database, "acme", "agent_alice")
    proxy = DroppingProxy(server.port, b"POST /v1/leases")
    arguments = {"resource_type": "deploy", "resource_id": "mcp", "purpose": "p", "ttl_seconds": 60}

    async def scenario() -> None:
        async with mcp_session(proxy.url, alice) as session:
            result = await session.call_tool("titen_lease_acquire", arguments)
            assert not result.is_error, text(result)

    try:
        run(scenario)
    finally:
        proxy.close()
    sent = keys_sent(proxy)
    assert len(sent) == 2 and sent[0] == sent[1]
    events = Http(server.url, alice).request("GET", "/v1/events?types=lease.acquired")[1]
    assert len(events["data"]["events"]) == 1
