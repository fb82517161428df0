"""The inbox is a pure function of the log: it catches up and rebuilds to the same rows."""

from __future__ import annotations

import falcon.testing

from tests.support import bearer
from titen.api.rest.app import create_app
from titen.service.bootstrap import bootstrap


def test_a_rebuilt_inbox_equals_the_live_one(client, services, key, clock):
    sender = key("acme", "agent_sender")
    recipients = {name: key("acme", name) for name in ("agent_a", "agent_b")}
    outsider = key("umbra", "agent_a")
    key("umbra", "agent_z")
    for n in range(12):
        clock.advance(1)
        to = "agent_a" if n % 3 else "agent_b"
        created = client.simulate_post(
            "/v1/handoffs",
            json={"to_principal": to, "subject_id": f"s{n % 4}", "message": f"m{n}"},
            headers=bearer(sender),
        )
        if n % 4 == 1:
            client.simulate_post(
                f"/v1/handoffs/{created.json['data']['handoff_id']}/resolve",
                json={"status": "accepted" if n % 2 else "rejected"},
                headers=bearer(recipients[to]),
            )
        client.simulate_post(
            "/v1/handoffs",
            json={"to_principal": "agent_z", "subject_id": "u"},
            headers=bearer(outsider),
        )

    def listings() -> dict[str, object]:
        return {
            name: client.simulate_get("/v1/handoffs", headers=bearer(k)).json
            for name, k in recipients.items()
        }

    live_rows = services.inbox.rows()
    live = listings()
    assert len(live_rows) == 12 - 3 + 12  # acme's pending plus umbra's
    services.projector.rebuild("handoff_inbox")
    assert services.inbox.rows() == live_rows
    assert listings() == live


def test_events_stored_without_their_read_models_are_applied_once_at_startup(
    client, services, key, clock
):
    """A store an earlier release wrote may hold events its read models never applied (it
    applied them after the commit); the next start applies them, once, before serving."""
    sender = key("acme", "agent_sender")
    reviewer = key("acme", "agent_reviewer")
    services.app.recorder.inline = None  # as the earlier release recorded: events only
    missed = services.app.create_handoff(
        organization="acme",
        from_principal="agent_sender",
        to_principal="agent_reviewer",
        subject_id="missed",
        context_id=None,
        checkpoint_id=None,
        message=None,
        is_principal=lambda name: True,
    ).value.handoff_id
    inbox = client.simulate_get("/v1/handoffs", headers=bearer(reviewer)).json["data"]
    assert inbox["handoffs"] == []  # committed, not applied by anyone

    restarted = bootstrap(services.database.url, clock, pool_size=4)
    try:
        client = falcon.testing.TestClient(create_app(restarted))
        created = client.simulate_post(
            "/v1/handoffs",
            json={"to_principal": "agent_reviewer", "subject_id": "next"},
            headers=bearer(sender),
        ).json["data"]["handoff_id"]
        inbox = client.simulate_get("/v1/handoffs", headers=bearer(reviewer)).json["data"]
        assert [h["handoff_id"] for h in inbox["handoffs"]] == [missed, created]
        for name in restarted.projector.projections:
            assert restarted.projector.verify(name) is None, name
    finally:
        restarted.close()
