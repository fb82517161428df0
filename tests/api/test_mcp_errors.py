"""`/mcp`'s refusals are JSON-RPC 2.0 errors in REST's words, with REST's status and headers;
a page of a foreign origin is refused; a body that is no JSON-RPC message is refused in titen's
words, never the MCP SDK's model library's."""

from __future__ import annotations

import json
from typing import Any

import falcon
import falcon.testing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import bearer
from titen.api.rest import errors, jsonrpc
from titen.api.rest.app import create_app
from titen.api.rest.body import MAX_BODY_BYTES
from titen.api.rest.settings import ServerSettings

ACCEPT = {"accept": "application/json, text/event-stream"}
JSON_BODY = {"content-type": "application/json", **ACCEPT}
PING = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
PAGE = "https://agents.example"
ERROR = {"code": 1, "message": "m"}
ERROR_WORDS = "error must be an object with an integer code and a string message."
LIBRARY_WORDS = ("pydantic", "validation error", "input_value", "type=", "jsonrpc_message")


def rpc_error(answer: falcon.testing.Result, code: str, rpc: int) -> str:
    """The JSON-RPC error's message, once its shape is checked."""
    assert answer.headers["content-type"] == "application/json"
    body = answer.json
    assert set(body) == {"jsonrpc", "id", "error"}
    assert (body["jsonrpc"], body["id"]) == ("2.0", None)
    assert body["error"]["code"] == rpc
    assert body["error"]["data"] == {"code": code}
    return body["error"]["message"]


def rest_message(answer: falcon.testing.Result) -> str:
    return answer.json["error"]["message"]


def post(client: falcon.testing.TestClient, body: Any, **headers: str) -> falcon.testing.Result:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.simulate_post(jsonrpc.PATH, body=raw, headers={**JSON_BODY, **headers})


def test_a_missing_or_wrong_key_is_401_with_bearer_and_rests_words(client):
    rest = client.simulate_get("/v1/handoffs")
    for headers in ({}, bearer("titen_" + "0" * 48)):
        answer = post(client, PING, **headers)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"
        message = rpc_error(answer, "UNAUTHORIZED", jsonrpc.INVALID_REQUEST)
        assert message == rest_message(rest)


def test_refusals_of_the_request_keep_their_status_and_rests_words(client, alice):
    key = bearer(alice)
    plain = client.simulate_post(
        jsonrpc.PATH, body=b"{}", headers={**key, "content-type": "text/plain"}
    )
    assert plain.status_code == 415
    assert (
        rpc_error(plain, "UNSUPPORTED_MEDIA_TYPE", jsonrpc.INVALID_REQUEST)
        == (errors.DEFAULT_MESSAGES[415])
    )
    big = post(client, b"{" + b" " * MAX_BODY_BYTES + b"}", **key)
    assert big.status_code == 413
    assert (
        rpc_error(big, "PAYLOAD_TOO_LARGE", jsonrpc.INVALID_REQUEST)
        == (errors.DEFAULT_MESSAGES[413])
    )
    stream = client.simulate_get(jsonrpc.PATH, headers={**ACCEPT, **key})
    assert stream.status_code == 405
    assert "POST" in stream.headers["allow"]
    rpc_error(stream, "METHOD_NOT_ALLOWED", jsonrpc.INVALID_REQUEST)
    foreign = post(client, PING, **key, **{"Mcp-Session-Id": "made-up"})
    assert foreign.status_code == 404
    rpc_error(foreign, "NOT_FOUND", jsonrpc.INVALID_REQUEST)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ([PING], jsonrpc.NOT_A_MESSAGE),
        ("ping", jsonrpc.NOT_A_MESSAGE),
        (42, jsonrpc.NOT_A_MESSAGE),
        (None, jsonrpc.NOT_A_MESSAGE),
        ({}, 'jsonrpc must be "2.0".'),
        ({**PING, "jsonrpc": "1.0"}, 'jsonrpc must be "2.0".'),
        ({"jsonrpc": "2.0", "id": 1}, jsonrpc.NOT_A_MESSAGE),
        ({**PING, "id": True}, "id must be a string, an integer or null."),
        ({**PING, "id": 1.5}, "id must be a string, an integer or null."),
        ({**PING, "method": 3}, "method must be of type string."),
        ({**PING, "params": [1]}, "params must be an object."),
        ({**PING, "params": None}, "params must be an object."),
        ({**PING, "result": 5}, "result must be an object."),
        ({"jsonrpc": "2.0", "id": 1, "result": []}, "result must be an object."),
        ({"jsonrpc": "2.0", "id": 1, "result": {}, "params": 5}, "params must be an object."),
        ({"jsonrpc": "2.0", "id": None, "result": {}}, "id must be a string or an integer."),
        ({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}}, ERROR_WORDS),
        ({"jsonrpc": "2.0", "id": 1, "result": {}, "error": ERROR}, jsonrpc.NOT_A_MESSAGE),
        ({"jsonrpc": "2.0", "id": 1, "error": "no"}, ERROR_WORDS),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}}, ERROR_WORDS),
        ({"jsonrpc": "2.0", "id": None, "error": {"code": 1}}, ERROR_WORDS),
    ],
)
def test_a_body_that_is_no_json_rpc_message_is_refused_in_titens_words(client, alice, body, words):
    answer = post(client, body, **bearer(alice))
    assert answer.status_code == 400
    assert rpc_error(answer, "VALIDATION_ERROR", jsonrpc.INVALID_REQUEST) == words
    assert not any(word in answer.text.lower() for word in LIBRARY_WORDS), answer.text


def test_a_body_that_is_no_json_is_a_parse_error_as_rest_words_it(client, alice):
    answer = post(client, b"{not json", **bearer(alice))
    assert answer.status_code == 400
    message = rpc_error(answer, "VALIDATION_ERROR", jsonrpc.PARSE_ERROR)
    rest = client.simulate_post(
        "/v1/leases", body=b"{not json", headers={**JSON_BODY, **bearer(alice)}
    )
    assert message == rest_message(rest)


def test_a_page_of_a_foreign_origin_is_403_and_its_own_or_a_named_one_is_served(services, alice):
    client = falcon.testing.TestClient(create_app(services, ServerSettings(cors_origins=(PAGE,))))
    key = bearer(alice)
    for origin in ("http://evil.example", "null", "http://falconframework.org:81", "x"):
        refused = post(client, PING, **key, Origin=origin)
        assert refused.status_code == 403, origin
        assert rpc_error(refused, "FORBIDDEN", jsonrpc.INVALID_REQUEST) == (
            "Pages may call /mcp only from this server's own origin or one named by --cors-origin."
        )
    # TestClient's requests reach the server as Host falconframework.org.
    for origin in (None, PAGE, "http://falconframework.org", "https://FalconFramework.org"):
        headers = key if origin is None else {**key, "Origin": origin}
        served = post(client, PING, **headers)
        assert served.status_code == 200, (origin, served.text)
        assert served.json == {"jsonrpc": "2.0", "id": 7, "result": {}}


class Budget:
    """A refusal added on every path by someone else's middleware (a rate limit, say)."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        raise errors.error(429, "This organization's budget is spent; retry shortly.")


@pytest.mark.parametrize("path", [jsonrpc.PATH, "/v1/leases"])
def test_a_refusal_added_later_takes_the_mcp_shape_on_mcp_alone(path):
    app = falcon.App(middleware=[Budget()])
    errors.install(app)
    answer = falcon.testing.TestClient(app).simulate_post(path, json=PING)
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == str(errors.RETRY_AFTER_SECONDS)
    words = "This organization's budget is spent; retry shortly."
    if path == jsonrpc.PATH:
        assert rpc_error(answer, "TOO_MANY_REQUESTS", jsonrpc.INVALID_REQUEST) == words
    else:
        assert answer.json == {"error": {"code": "TOO_MANY_REQUESTS", "message": words}}


def test_a_server_side_refusal_is_json_rpcs_internal_error():
    assert errors.envelope(jsonrpc.PATH, 503, "UNAVAILABLE", "Retry.") == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": jsonrpc.INTERNAL_ERROR,
            "message": "Retry.",
            "data": {"code": "UNAVAILABLE"},
        },
    }


@pytest.mark.parametrize(
    "message",
    [
        PING,
        {**PING, "params": {}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "a", "result": {}},
        {"jsonrpc": "2.0", "id": None, "error": ERROR},
    ],
)
def test_every_kind_of_json_rpc_message_is_let_through(message):
    assert jsonrpc.problem(message) is None


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["code", "message", "x"]), st.integers() | st.text(max_size=2)),
)
MESSAGES = st.dictionaries(
    st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "extra"]),
    VALUES | st.just("2.0"),
)


@settings(max_examples=500, deadline=None)
@given(MESSAGES)
def test_what_titen_lets_through_the_sdk_reads_without_refusing(message):
    """So the SDK's own refusal, in its model library's words, is never what a client reads."""
    from mcp_types.jsonrpc import jsonrpc_message_adapter

    if jsonrpc.problem(message) is None:
        jsonrpc_message_adapter.validate_python(message, by_name=False)
