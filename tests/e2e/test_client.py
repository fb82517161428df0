"""The Python client against a real `titen serve` (SQLite: the client adds no backend behaviour)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest

from tests.support import Server, create_key, free_port
from titen.client import (
    Handoff,
    LeaseConflict,
    LeaseLost,
    NotFound,
    TitenClient,
    TitenError,
    Unauthorized,
    Unreachable,
    ValidationError,
)
from titen.client.errors import raise_for

CLIENTS = Path(__file__).parents[2] / "docs" / "clients.md"


pytestmark = pytest.mark.backends("sqlite")


@pytest.fixture(scope="module")
def principals(module_server: Server) -> dict[str, str]:
    """The keys of the module's principals on its server, by name."""
    return {
        name: create_key(module_server.database, org, name, role)
        for org, name, role in [
            ("acme", "agent_alice", "agent"),
            ("acme", "agent_bob", "agent"),
            ("acme", "agent_carol", "agent"),
            ("acme", "ops", "operator"),
            ("umbra", "agent_eve", "agent"),
        ]
    }


@pytest.fixture
def connect(module_server: Server, principals: dict[str, str]) -> Iterator:
    opened: list[TitenClient] = []

    def make(principal: str) -> TitenClient:
        opened.append(TitenClient(module_server.url, principals[principal]))
        return opened[-1]

    yield make
    for client in opened:
        client.close()


@pytest.fixture
def alice(connect) -> TitenClient:
    return connect("agent_alice")


@pytest.fixture
def bob(connect) -> TitenClient:
    return connect("agent_bob")


@pytest.fixture
def resource(request: pytest.FixtureRequest) -> str:
    """A resource id of this test's own, so tests sharing the server never collide."""
    return request.node.name


def acquire(client: TitenClient, resource_id: str, ttl_seconds: int = 600):
    return client.acquire_lease("deploy", resource_id, purpose="smoke", ttl_seconds=ttl_seconds)


def test_acquire_and_release_return_typed_values(alice, resource):
    before = datetime.now(UTC)
    lease = acquire(alice, resource)
    assert re.fullmatch(r"lease_[0-9a-f]{32}", lease.lease_id)
    assert lease.expires_at.tzinfo is not None
    assert timedelta(seconds=590) < lease.expires_at - before < timedelta(seconds=610)
    released_at = alice.release_lease(lease.lease_id)
    assert before - timedelta(seconds=5) < released_at < lease.expires_at
    with pytest.raises(NotFound) as missing:
        alice.release_lease(lease.lease_id)
    assert (missing.value.code, missing.value.status) == ("NOT_FOUND", 404)
    assert missing.value.message == f"No unreleased lease {lease.lease_id}."


def test_each_lease_carries_the_next_fencing_token_and_get_lease_checks_it(
    connect, alice, bob, resource
):
    first = acquire(alice, resource)
    assert first.fencing_token == 1
    with alice.lease("deploy", resource, purpose="smoke", ttl_seconds=600) as held:
        assert held.fencing_token == 2  # superseded the first
        current = alice.get_lease(held.lease_id)
        assert (current.fencing_token, current.holder, current.expired) == (2, "agent_alice", False)
        assert current.expires_at == held.expires_at
        assert connect("ops").get_lease(held.lease_id) == current
        with pytest.raises(NotFound):
            bob.get_lease(held.lease_id)  # not its holder
        held.reacquire(ttl_seconds=600)
        assert held.fencing_token == 3
    with pytest.raises(NotFound) as gone:
        alice.get_lease(held.lease_id)  # released by the block
    assert gone.value.message == f"No unreleased lease {held.lease_id}."
    assert acquire(bob, resource).fencing_token == 4


def test_a_conflict_carries_the_expiry_and_the_whole_message(alice, bob, resource):
    lease = acquire(alice, resource)
    with pytest.raises(LeaseConflict) as conflict:
        acquire(bob, resource)
    error = conflict.value
    assert isinstance(error, TitenError)
    assert (error.code, error.status) == ("CONFLICT", 409)
    assert error.expires_at == lease.expires_at
    assert re.fullmatch(r"Resource is leased by another principal until \S+Z\.", error.message), (
        error.message
    )
    assert str(error) == error.message


def test_a_bad_field_is_a_validation_error_in_the_service_words(alice, resource):
    with pytest.raises(ValidationError) as invalid:
        acquire(alice, resource, ttl_seconds=5)
    assert (invalid.value.code, invalid.value.status) == ("VALIDATION_ERROR", 400)
    assert invalid.value.message == "ttl_seconds must be from 10 to 86400."


def test_a_wrong_key_is_unauthorized(module_server, resource):
    with (
        TitenClient(module_server.url, "titen_" + "0" * 48) as stranger,
        pytest.raises(Unauthorized) as e,
    ):
        acquire(stranger, resource)
    assert (e.value.code, e.value.status) == ("UNAUTHORIZED", 401)
    assert e.value.message.startswith("A valid API key is required")


def test_nothing_listening_is_unreachable_and_not_an_http_error(resource):
    url = f"http://127.0.0.1:{free_port()}"
    with TitenClient(url, "titen_any") as lost, pytest.raises(Unreachable) as e:
        acquire(lost, resource)
    assert (e.value.code, e.value.status) == ("UNREACHABLE", None)
    assert e.value.message.startswith(f"Titen is unreachable at {url}: ")
    assert isinstance(e.value, TitenError)


def test_a_url_without_a_scheme_is_refused_up_front():
    with pytest.raises(ValueError, match="must start with http"):
        TitenClient("127.0.0.1:8787", "titen_any")


def test_an_answer_that_is_not_titen_json_is_a_bad_response():
    request = httpx2.Request("GET", "http://127.0.0.1:8787/v1/handoffs")
    with pytest.raises(TitenError) as e:
        raise_for(httpx2.Response(502, text="<html>Bad gateway</html>", request=request))
    assert (e.value.code, e.value.status) == ("BAD_RESPONSE", 502)
    assert "Bad gateway" in e.value.message


def test_the_lease_block_releases_on_normal_exit(alice, bob, resource):
    with (
        alice.lease("deploy", resource, purpose="smoke", ttl_seconds=600) as held,
        pytest.raises(LeaseConflict),
    ):
        acquire(bob, resource)
    assert acquire(bob, resource).lease_id != held.lease_id
    with pytest.raises(NotFound):
        alice.release_lease(held.lease_id)


def test_the_lease_block_releases_on_an_exception_and_lets_it_through(alice, bob, resource):
    boom = RuntimeError("boom")
    with (
        pytest.raises(RuntimeError) as raised,
        alice.lease("deploy", resource, purpose="smoke", ttl_seconds=600),
    ):
        raise boom
    assert raised.value is boom
    assert not getattr(boom, "__notes__", None)
    acquire(bob, resource)  # released: no conflict


def test_a_superseded_lease_does_not_mask_the_block_exception(alice, bob, resource):
    with (
        pytest.raises(RuntimeError, match="boom") as raised,
        alice.lease("deploy", resource, purpose="smoke", ttl_seconds=600) as held,
    ):
        newer = acquire(alice, resource)  # not through the block's lease: supersedes it
        raise RuntimeError("boom")
    assert f"Releasing lease {held.lease_id} failed too" in raised.value.__notes__[0]
    with pytest.raises(LeaseConflict):  # the newer lease is still held
        acquire(bob, resource)
    alice.release_lease(newer.lease_id)


def test_a_lease_gone_by_a_normal_exit_raises_lease_lost(connect, alice, resource):
    with (
        pytest.raises(LeaseLost) as lost,
        alice.lease("deploy", resource, purpose="smoke", ttl_seconds=600) as held,
    ):
        connect("ops").release_lease(held.lease_id)  # an operator ends it meanwhile
    assert isinstance(lost.value, NotFound)
    assert (lost.value.code, lost.value.status) == ("NOT_FOUND", 404)
    assert held.lease_id in lost.value.message


def test_reacquire_extends_under_a_new_id_which_the_block_releases(alice, bob, resource):
    with alice.lease("deploy", resource, purpose="smoke", ttl_seconds=60) as held:
        first = held.lease
        renewed = held.reacquire(ttl_seconds=1200)
        assert held.lease_id == renewed.lease_id != first.lease_id
        assert held.expires_at > first.expires_at
    acquire(bob, resource)  # the newest lease was released


def test_a_release_that_cannot_reach_the_service_is_a_note_not_a_mask(tmp_path):
    database = f"sqlite:///{tmp_path}/titen.db"
    key = create_key(database, "acme", "agent_alice")
    server = Server(database)
    try:
        with TitenClient(server.url, key) as client:
            with (
                pytest.raises(RuntimeError, match="boom") as raised,
                client.lease("deploy", "outer", purpose="smoke", ttl_seconds=600),
            ):
                with (
                    pytest.raises(Unreachable),  # a normal exit: the failed release is the error
                    client.lease("deploy", "inner", purpose="smoke", ttl_seconds=600),
                ):
                    server.stop()
                raise RuntimeError("boom")  # an exception: the failed release is only a note
            assert "is unreachable" in raised.value.__notes__[0]
    finally:
        server.stop()


def test_a_handoff_is_created_listed_read_and_resolved_once(connect, alice, bob, resource):
    sent = alice.create_handoff("agent_bob", resource, message="Smoke passed.")
    assert re.fullmatch(r"hoff_[0-9a-f]{32}", sent.handoff_id)
    assert sent.status == "pending"

    [item] = bob.inbox(subject_id=resource).handoffs
    assert isinstance(item, Handoff)
    assert (item.handoff_id, item.from_principal, item.to_principal) == (
        sent.handoff_id,
        "agent_alice",
        "agent_bob",
    )
    assert (item.subject_id, item.message, item.status) == (resource, "Smoke passed.", "pending")
    assert (item.context_id, item.checkpoint_id, item.resolved_at) == (None, None, None)
    assert item.created_at.tzinfo is not None
    assert alice.inbox(subject_id=resource).handoffs == []  # the sender's list is empty

    assert alice.get_handoff(sent.handoff_id).status == "pending"
    with pytest.raises(ValidationError) as not_target:
        alice.resolve_handoff(sent.handoff_id, "accepted")
    assert not_target.value.message == "Only the target principal can resolve a handoff."

    resolved = bob.resolve_handoff(sent.handoff_id, "accepted")
    assert (resolved.status, resolved.handoff_id) == ("accepted", sent.handoff_id)
    assert resolved.resolved_at is not None and resolved.resolved_at >= resolved.created_at
    assert alice.get_handoff(sent.handoff_id) == resolved
    with pytest.raises(NotFound):
        bob.resolve_handoff(sent.handoff_id, "rejected")
    with pytest.raises(NotFound):
        connect("agent_eve").get_handoff(sent.handoff_id)  # another organization sees nothing


def test_the_inbox_pages_with_the_cursor(connect, alice, resource):
    carol = connect("agent_carol")
    sent = [alice.create_handoff("agent_carol", resource).handoff_id for _ in range(5)]
    seen, cursor = [], None
    while True:
        page = carol.inbox(limit=2, cursor=cursor, subject_id=resource)
        assert len(page.handoffs) <= 2
        seen += [handoff.handoff_id for handoff in page.handoffs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == sent
    assert [h.handoff_id for h in carol.iter_inbox(subject_id=resource, page_size=2)] == sent
    with pytest.raises(ValidationError, match="cursor is not valid"):
        carol.inbox(cursor="not-a-cursor")


def test_a_handoff_to_nobody_or_to_oneself_is_a_validation_error(alice, resource):
    for target in ("agent_nobody", "agent_alice"):
        with pytest.raises(ValidationError) as invalid:
            alice.create_handoff(target, resource)
        assert "to_principal" in invalid.value.message


def test_an_id_cannot_escape_its_path_segment(alice):
    with pytest.raises(NotFound):
        alice.get_handoff("../leases")
    with pytest.raises(NotFound):
        alice.release_lease("x/../../handoffs")


def test_the_documented_example_runs_as_written(module_server, principals):
    section = CLIENTS.read_text().split("## The Python client", 1)[1].split("\n## ", 1)[0]
    [example] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    reviewer = "agent_reviewer"
    create_key(module_server.database, "acme", reviewer)
    result = subprocess.run(
        [sys.executable, "-c", example],
        env={"TITEN_URL": module_server.url, "TITEN_API_KEY": principals["agent_alice"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"holding lease_[0-9a-f]{32} until ", result.stdout), result.stdout
    assert re.search(r"hoff_[0-9a-f]{32} pending", result.stdout), result.stdout
