"""The console in a real browser: Selenium drives Chromium against a real `titen serve`, on both
backends.

An operator opens the page with its key; what agents do over REST shows up live (a lease within
3 s, with its holder; a handoff under its recipient; both in the tail); Release asks for
confirmation and is recorded as the operator's; History shows a resource's terms in order; an
agent's key sees only its own leases. The browser logs no error and asks nothing of another
origin; a wrong key and a dropped stream are said on the page.
"""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.e2e.console_driver import (
    chrome,
    chromedriver_path,
    errors_logged,
    open_console,
    region,
    requested,
    wait,
)
from tests.receiver import Receiver
from tests.support import Http, Server, chromium_path, create_key, eventually, free_port

pytestmark = [pytest.mark.slow, pytest.mark.server("--heartbeat-seconds", "1")]
LIVE_WITHIN = 3  # seconds, as the issue asks of a lease acquired over REST


def acquire(
    http: Http, key: str, resource_id: str, purpose: str = "smoke test", ttl: int = 600
) -> str:
    body = {"resource_type": "deploy", "resource_id": resource_id, "purpose": purpose}
    status, answer = http.request("POST", "/v1/leases", {**body, "ttl_seconds": ttl}, key=key)
    assert status == 201, answer
    return answer["data"]["lease_id"]


LEASE_ROWS = """
return [...document.querySelectorAll("section[aria-label='Leases'] tbody tr")].map((row) => {
  const cell = (name) => row.querySelector("." + name).textContent;
  return {lease_id: row.dataset.leaseId, resource: cell("resource"), holder: cell("holder"),
          purpose: cell("purpose"), token: cell("token"), expiry: cell("expiry"),
          actions: cell("actions")};
});
"""


def lease_rows(driver) -> list[dict[str, str]]:
    """The rows as the page shows them now, read in one step (the page re-renders them)."""
    return driver.execute_script(LEASE_ROWS)


def texts(driver, selector: str) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)", selector
    )


def tail(driver) -> list[str]:
    return texts(driver, "section[aria-label='Events'] .tail li")


@pytest.fixture
def console(server):
    """The console's server (the module's mark) and keys of an operator and two agents."""
    chromedriver_path()  # skipped (or failed, in CI) before the browser is needed
    chromium_path()
    keys = {
        "ops": create_key(server.database, "acme", "ops", "operator"),
        "alice": create_key(server.database, "acme", "agent_alice"),
        "bob": create_key(server.database, "acme", "agent_bob"),
    }
    return server, keys


def test_an_operator_follows_leases_and_handoffs_live_and_releases_with_confirmation(console):
    server, keys = console
    http = Http(server.url)
    with chrome() as driver:
        open_console(driver, server.url, keys["ops"])
        status = driver.find_element(By.ID, "stream-status")
        wait(driver, "the stream live", lambda: status.text.startswith("Live"))
        assert "ops (operator) of acme" in driver.find_element(By.ID, "who").text

        lease_id = acquire(http, keys["alice"], "checkout", "run rollback smoke")
        wait(
            driver,
            "the new lease with its holder",
            lambda: any(
                r["resource"] == "deploy/checkout" and r["holder"] == "agent_alice"
                for r in lease_rows(driver)
            ),
            timeout=LIVE_WITHIN,
        )
        (row,) = lease_rows(driver)
        assert row["token"] == "1" and row["expiry"].startswith(("9m", "10m"))
        assert row["actions"] == "Release" and row["purpose"] == "run rollback smoke"

        body = {"to_principal": "agent_bob", "subject_id": "ticket-7", "message": "please review"}
        assert http.request("POST", "/v1/handoffs", body, key=keys["alice"])[0] == 201
        handoffs = region(driver, "Handoffs")
        wait(driver, "the handoff", lambda: "ticket-7" in handoffs.text)
        group = handoffs.find_element(
            By.CSS_SELECTOR, "section[aria-label='Handoffs to agent_bob']"
        )
        assert "To agent_bob (1)" in group.text
        assert "from agent_alice" in group.text and "please review" in group.text
        assert " ago" in group.text

        wait(driver, "both events in the tail", lambda: len(tail(driver)) == 2)
        newest, oldest = tail(driver)
        assert (
            newest.startswith("handoff.created") and "ticket-7: agent_alice → agent_bob" in newest
        )
        assert oldest.startswith("lease.acquired") and "deploy/checkout by agent_alice" in oldest
        Select(driver.find_element(By.ID, "event-type")).select_by_visible_text("lease.acquired")
        wait(driver, "the tail filtered", lambda: len(tail(driver)) == 1)
        assert tail(driver)[0].startswith("lease.acquired")

        region(driver, "Leases").find_element(By.XPATH, ".//button[.='Release']").click()
        confirmation = wait(driver, "the confirmation", lambda: driver.switch_to.alert)
        assert "deploy/checkout held by agent_alice" in confirmation.text
        confirmation.accept()
        wait(driver, "the lease gone", lambda: lease_rows(driver) == [])
        status_code, _ = http.request("GET", f"/v1/leases/{lease_id}", key=keys["alice"])
        assert status_code == 404
        _, audit = http.request("GET", f"/v1/audit/leases/{lease_id}", key=keys["ops"])
        assert audit["data"]["released_by"] == "ops"
        assert audit["data"]["ended"] == "released_by_operator"

        first = acquire(http, keys["alice"], "history")
        acquire(http, keys["alice"], "history")  # supersedes the first term
        third = acquire(http, keys["bob"], "other")
        assert http.request("DELETE", f"/v1/leases/{third}", key=keys["bob"])[0] == 200
        last = acquire(http, keys["bob"], "history-2")
        assert http.request("DELETE", f"/v1/leases/{last}", key=keys["bob"])[0] == 200
        history = region(driver, "History")
        history.find_element(By.ID, "history-type").send_keys("deploy")
        history.find_element(By.ID, "history-id").send_keys("history")
        history.find_element(By.XPATH, ".//button[.='Show history']").click()
        timeline = "section[aria-label='History'] .timeline li"
        wait(driver, "the terms", lambda: len(texts(driver, timeline)) == 2)
        terms = texts(driver, timeline)
        assert terms[0].startswith("#1 agent_alice: ") and terms[0].endswith(
            " superseded by agent_alice"
        )
        assert terms[1].startswith("#2 agent_alice: ") and terms[1].endswith(" held now")
        first_row = history.find_element(By.CSS_SELECTOR, ".timeline li")
        assert first_row.get_attribute("data-lease-id") == first

        assert "No subscriptions." in region(driver, "Webhooks").text

        assert errors_logged(driver) == []
        foreign = [url for url in requested(driver) if not url.startswith(server.url + "/")]
        assert foreign == []
        assert keys["ops"] not in " ".join(requested(driver))
        assert keys["ops"] not in driver.current_url
        stored = driver.execute_script("return sessionStorage.getItem('titen.console.key')")
        assert stored == keys["ops"]
        assert driver.execute_script("return localStorage.length") == 0
    assert keys["ops"] not in server.log_so_far()


def test_an_agent_sees_only_its_own_leases_and_its_inbox(console):
    server, keys = console
    http = Http(server.url)
    acquire(http, keys["alice"], "alices")
    short = acquire(http, keys["bob"], "bobs", ttl=10)  # the shortest TTL there is
    hand = {"to_principal": "agent_alice", "subject_id": "for-alice"}
    assert http.request("POST", "/v1/handoffs", hand, key=keys["bob"])[0] == 201
    with chrome() as driver:
        open_console(driver, server.url, keys["bob"])
        wait(driver, "bob's lease", lambda: len(lease_rows(driver)) == 1)
        (row,) = lease_rows(driver)
        assert row["holder"] == "agent_bob" and row["actions"] == "Release"  # its own
        acquire(http, keys["alice"], "alices-2")
        acquire(http, keys["bob"], "bobs-2")
        wait(driver, "bob's second lease", lambda: len(lease_rows(driver)) == 2)
        assert {r["holder"] for r in lease_rows(driver)} == {"agent_bob"}
        handoffs = region(driver, "Handoffs").text
        assert "Your inbox" in handoffs and "No pending handoffs." in handoffs
        expired = f"section[aria-label='Leases'] tr.expired[data-lease-id='{short}'] .expiry"
        wait(driver, "the short lease marked expired", lambda: texts(driver, expired), 15)
        assert texts(driver, expired) == ["expired"]
        assert errors_logged(driver) == []


def test_a_wrong_key_and_a_refused_route_show_the_services_message(console):
    server, keys = console
    with chrome() as driver:
        open_console(driver, server.url, "titen_not_a_key")
        shown = driver.find_element(By.ID, "page-error")
        wait(driver, "the refusal", lambda: shown.is_displayed())
        assert shown.text == "A valid API key is required: authorization: Bearer <key>."
        assert driver.find_element(By.ID, "console").is_displayed() is False

        open_console(driver, server.url, keys["alice"])
        history = region(driver, "History")
        wait(driver, "the console", lambda: history.is_displayed())
        history.find_element(By.ID, "history-type").send_keys("deploy")
        history.find_element(By.ID, "history-id").send_keys("x")
        history.find_element(By.XPATH, ".//button[.='Show history']").click()
        error = history.find_element(By.CSS_SELECTOR, ".error")
        wait(driver, "the 403", lambda: error.is_displayed())
        assert error.text == "This operation needs the operator role."


def test_a_dropped_stream_reconnects_by_itself_and_says_so(database):
    chromedriver_path()
    port = free_port()
    server = Server(database, 8, "--heartbeat-seconds", "1", port=port)
    ops = create_key(database, "acme", "ops", "operator")
    alice = create_key(database, "acme", "agent_alice")
    try:
        with chrome() as driver:
            open_console(driver, server.url, ops)
            status = driver.find_element(By.ID, "stream-status")
            wait(driver, "the stream live", lambda: status.text.startswith("Live"))
            server.stop()
            wait(
                driver,
                "the drop",
                lambda: "dropped" in status.text and "reconnecting" in status.text,
            )
            assert "down" in status.get_attribute("class")
            server = Server(database, 8, "--heartbeat-seconds", "1", port=port)
            wait(driver, "the reconnection", lambda: status.text == "Reconnected: live again.", 40)
            acquire(Http(server.url), alice, "after-the-drop")
            wait(
                driver,
                "a lease after the drop",
                lambda: [r["resource"] for r in lease_rows(driver)] == ["deploy/after-the-drop"],
            )
            wait(driver, "its event", lambda: any("after-the-drop" in t for t in tail(driver)))
    finally:
        server.stop()


def test_webhooks_show_each_subscription_with_its_last_deliveries_and_failures(database):
    chromedriver_path()
    answers = iter([500])
    receiver = Receiver(lambda _request: next(answers, 200))
    fast = ("--allow-private-webhooks", "--webhook-retry-seconds", "0.2,0.2,0.2")
    server = Server(database, 8, *fast)
    ops = create_key(database, "acme", "ops", "operator")
    alice = create_key(database, "acme", "agent_alice")
    http = Http(server.url)
    try:
        body = {"url": receiver.url, "types": ["lease.acquired"]}
        status, created = http.request("POST", "/v1/webhooks", body, key=ops)
        assert status == 201, created
        deliveries = f"/v1/webhooks/{created['data']['webhook_id']}/deliveries"
        acquire(http, alice, "hooked")
        receiver.wait_for(2)  # refused once, then delivered
        eventually(
            lambda: len(http.request("GET", deliveries, key=ops)[1]["data"]["deliveries"]) == 2,
            "both attempts recorded",
        )
        with chrome() as driver:
            open_console(driver, server.url, ops)
            shown = f"section[aria-label='Webhooks'] section[aria-label='Webhook {receiver.url}']"
            wait(driver, "the subscription", lambda: texts(driver, f"{shown} li"))
            assert texts(driver, f"{shown} h3") == [f"{receiver.url} (active)"]
            newest, oldest = driver.execute_script(
                "return [...document.querySelectorAll(arguments[0])]"
                ".map((li) => [li.textContent, li.className])",
                f"{shown} li",
            )
            assert " attempt 2: HTTP 200 " in newest[0] and newest[1] == ""
            assert " attempt 1: HTTP 500 " in oldest[0] and oldest[1] == "failed"
            assert errors_logged(driver) == []
    finally:
        server.stop()
        receiver.close()
