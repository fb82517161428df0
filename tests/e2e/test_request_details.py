"""Request details a real client meets, over real sockets on both backends: gzip bodies
(bounded), other encodings refused, echoes cut, numbers in query strings ASCII only."""

from __future__ import annotations

import gzip
import http.client
import json
import zlib

import pytest

from tests.support import Server, bearer
from titen.api.rest.body import MAX_BODY_BYTES

ACQUIRE = {"resource_type": "deploy", "resource_id": "gz", "purpose": "p", "ttl_seconds": 60}


# One server for the module: what a test leaves (a lease) is in its own organization.
pytestmark = pytest.mark.server(threads=4)


def send(
    server: Server, method: str, path: str, body: bytes = b"", headers: dict | None = None
) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def post(
    server: Server, key: str, body: bytes, encoding: str | None, path: str = "/v1/leases"
) -> tuple[int, dict]:
    headers = {**bearer(key), "content-type": "application/json"}
    if encoding is not None:
        headers["content-encoding"] = encoding
    return send(server, "POST", path, body, headers)


def test_a_gzip_body_is_decoded(module_server, own_key):
    status, answer = post(
        module_server, own_key, gzip.compress(json.dumps(ACQUIRE).encode()), "gzip"
    )
    assert status == 201, answer
    assert answer["data"]["fencing_token"] == 1


def test_the_limit_applies_to_the_decoded_body(module_server, own_key):
    padding = {**ACQUIRE, "purpose": "p"}
    document = json.dumps(padding).encode()
    over = document[:-1] + b" " * (MAX_BODY_BYTES + 1 - len(document)) + b"}"
    assert len(over) == MAX_BODY_BYTES + 1
    status, answer = post(module_server, own_key, gzip.compress(over), "gzip")
    assert (status, answer["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE")
    exact = over[:-2] + b"}"  # one byte less: exactly the limit, accepted
    assert post(module_server, own_key, gzip.compress(exact), "gzip")[0] == 201


def test_a_gzip_bomb_is_refused_without_inflating_it(module_server, own_key):
    """1 GiB of spaces in about 1 MB: refused at the limit; the server stays responsive."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b" " * (1 << 20)
    bomb = b"".join(deflate.compress(block) for _ in range(1024)) + deflate.flush()
    assert len(bomb) <= MAX_BODY_BYTES
    status, answer = post(module_server, own_key, bomb, "gzip")
    assert (status, answer["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert post(module_server, own_key, json.dumps(ACQUIRE).encode(), None)[0] == 201


@pytest.mark.parametrize("encoding", ["br", "deflate", "gzip, gzip", "compress"])
def test_any_other_encoding_is_415_in_the_envelope(module_server, own_key, encoding):
    status, answer = post(module_server, own_key, json.dumps(ACQUIRE).encode(), encoding)
    assert status == 415
    assert answer == {
        "error": {
            "code": "UNSUPPORTED_MEDIA_TYPE",
            "message": "Content-Encoding must be gzip, or absent.",
        }
    }


def test_a_body_that_is_not_gzip_is_400(module_server, own_key):
    status, answer = post(module_server, own_key, json.dumps(ACQUIRE).encode(), "gzip")
    assert (status, answer["error"]["message"]) == (400, "The request body is not valid gzip.")


def test_a_404_does_not_echo_a_huge_id(module_server, own_key):
    server, key = module_server, own_key
    huge = "a" * 60_000  # the request head stays under its 64 KiB limit
    for method, path in [
        ("GET", f"/v1/leases/lease_{huge}"),
        ("DELETE", f"/v1/leases/lease_{huge}"),
        ("GET", f"/v1/handoffs/hoff_{huge}"),
        ("GET", f"/v1/webhooks/{huge}"),
    ]:
        status, answer = send(server, method, path, b"", bearer(key))
        assert status == 404, path[:20]
        assert len(answer["error"]["message"]) <= 110, answer["error"]["message"][:200]


def test_an_unknown_field_of_900_kb_is_not_echoed_whole(module_server, own_key):
    body = json.dumps({**ACQUIRE, "x" * 900_000: 1}).encode()
    status, answer = post(module_server, own_key, body, None)
    assert status == 400
    message = answer["error"]["message"]
    assert message.startswith("Unknown field: xxx") and len(message) <= 120


@pytest.mark.parametrize("wait", ["1_0", "%205", "%D9%A1", "1e1", "inf", "0x1", "5%0A"])
def test_numbers_in_query_strings_are_ascii_decimals_only(module_server, own_key, wait):
    server, key = module_server, own_key
    status, answer = send(server, "GET", f"/v1/events?after=latest&wait={wait}", b"", bearer(key))
    assert status == 400
    assert answer["error"]["message"].startswith("wait must be a number of seconds")


def test_an_ascii_decimal_wait_is_taken(module_server, own_key):
    server, key = module_server, own_key
    status, _ = send(server, "GET", "/v1/events?after=latest&wait=0.05", b"", bearer(key))
    assert status == 200
