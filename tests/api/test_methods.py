"""HEAD on every GET route, OPTIONS on every route, and one `Allow` header for OPTIONS and 405."""

from __future__ import annotations

import re

import falcon.testing

from tests.support import bearer
from titen.api.rest.app import ROUTES, create_app
from titen.api.rest.settings import ServerSettings

OTHER_METHODS = ("PUT", "PATCH", "DELETE", "POST", "GET")
STREAM = "/v1/events/stream"


def paths() -> list[tuple[str, set[str]]]:
    """Every route as a concrete path (ids that exist nowhere) and its declared methods."""
    return [
        (re.sub(r"{\w+}", "missing", template), set(resource.contract))
        for template, resource in ROUTES
    ]


def test_head_answers_every_get_route_as_get_does_without_the_body(client, ops):
    checked = 0
    for path, methods in paths():
        if "GET" not in methods:
            continue
        for headers in (bearer(ops), {}):  # authorized, and refused when the route needs a key
            if path == STREAM and headers:
                continue  # its GET never ends: the next test
            got = client.simulate_get(path, headers=headers)
            head = client.simulate_head(path, headers=headers)
            assert head.status_code == got.status_code, path
            assert head.content == b"", path
            assert head.headers.get("content-type") == got.headers.get("content-type"), path
            assert head.headers.get("content-length") == got.headers.get("content-length"), path
            checked += 1
    assert checked >= 2 * 12 - 1


def test_head_on_the_event_stream_takes_no_subscriber_slot(services, alice):
    client = falcon.testing.TestClient(create_app(services, ServerSettings(max_subscribers=1)))
    for _ in range(3):
        head = client.simulate_head(STREAM, headers=bearer(alice))
        assert head.status_code == 200
        assert head.headers["content-type"] == "text/event-stream"
        assert head.content == b""
    waiting = client.simulate_get("/v1/events?after=latest&wait=0.01", headers=bearer(alice))
    assert waiting.status_code == 200  # the one slot is still free


def test_options_and_405_name_the_same_methods_and_need_no_key(client, alice):
    for path, methods in paths():
        options = client.simulate_options(path)  # no key
        assert options.status_code == 200, path
        allowed = {*methods, "OPTIONS"} | ({"HEAD"} if "GET" in methods else set())
        assert options.headers["allow"] == ", ".join(sorted(allowed)), path
        other = next(m for m in OTHER_METHODS if m not in methods)
        refused = client.simulate_request(other, path, headers=bearer(alice))
        assert refused.status_code == 405, (other, path)
        error = refused.json["error"]
        assert error.get("data", error)["code"] == "METHOD_NOT_ALLOWED"  # on /mcp: JSON-RPC's
        assert refused.headers["allow"] == options.headers["allow"], path
