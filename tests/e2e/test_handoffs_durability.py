"""The inbox outlives its server process."""

from __future__ import annotations

from tests.support import Http, Server
from titen.service.bootstrap import bootstrap


def test_a_restart_keeps_the_inbox(database):
    services = bootstrap(database, pool_size=2)
    try:
        sender = services.keys.create("acme", "agent_sender", "agent")
        reviewer = services.keys.create("acme", "agent_reviewer", "agent")
    finally:
        services.close()

    server = Server(database)
    try:
        as_sender = Http(server.url, sender)
        ids = []
        for n in range(5):
            status, body = as_sender.request(
                "POST", "/v1/handoffs", {"to_principal": "agent_reviewer", "subject_id": f"s{n}"}
            )
            assert status == 201
            ids.append(body["data"]["handoff_id"])
        status, _ = Http(server.url, reviewer).request(
            "POST", f"/v1/handoffs/{ids[1]}/resolve", {"status": "rejected"}
        )
        assert status == 200
        status, before = Http(server.url, reviewer).request("GET", "/v1/handoffs")
        assert [h["handoff_id"] for h in before["data"]["handoffs"]] == ids[:1] + ids[2:]
    finally:
        server.kill()  # no chance to clean up, as in a crash

    server = Server(database)
    try:
        status, after = Http(server.url, reviewer).request("GET", "/v1/handoffs")
        assert (status, after) == (200, before)
        status, body = Http(server.url, sender).request("GET", f"/v1/handoffs/{ids[1]}")
        assert (status, body["data"]["status"]) == (200, "rejected")
    finally:
        server.stop()
