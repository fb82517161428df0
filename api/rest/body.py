"""Reading a JSON request body: size, encoding, media type, syntax, then its JSON Schema.
A gzip body is inflated at most to the limit plus one byte, so a "gzip bomb" is refused (413)
without being inflated further."""

from __future__ import annotations

import json
import sys
import zlib
from typing import Any

import falcon

from titen.api.rest.errors import error
from titen.api.validation import Checker, refusal
from titen.domain.json_depth import nests_deeper

MAX_BODY_BYTES = 1024 * 1024
MAX_DEPTH = 32
"""No request needs deeper nesting, and the parser and the walks after it recurse."""


class BodyLimit:
    """Falcon middleware: a declared body over the limit is refused before routing."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.content_length is not None and req.content_length > MAX_BODY_BYTES:
            raise error(413)


def read_json(req: falcon.Request, checker: Checker) -> dict[str, Any]:
    raw = read_body(req)
    require_json(req)
    body = parse_json(raw, "The request body")
    refused = refusal(body, checker)
    if refused is not None:
        raise error(400, refused)
    return body


def read_body(req: falcon.Request) -> bytes:
    """The body as sent before its Content-Encoding; 413 past the limit, however it came."""
    raw = req.bounded_stream.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES or len(raw := decoded(req, raw)) > MAX_BODY_BYTES:
        raise error(413)
    return raw


def require_json(req: falcon.Request) -> None:
    if falcon.parse_header(req.content_type or "")[0].lower() != falcon.MEDIA_JSON:
        raise error(415)


def parse_json(raw: bytes | str, what: str) -> Any:
    """JSON from a client, nested at most MAX_DEPTH deep; 400 naming `what` otherwise."""
    try:
        if not nests_deeper(raw, MAX_DEPTH):
            return json.loads(raw)
    except RecursionError:  # not expected (measured first): still the client's error
        pass
    except json.JSONDecodeError as exc:
        where = f"at line {exc.lineno}, column {exc.colno}"
        raise error(400, f"{what} is not valid JSON ({where}).") from None
    except UnicodeDecodeError:
        raise error(400, f"{what} is not valid JSON: it is not UTF-8, -16 or -32 text.") from None
    except ValueError:  # the one other refusal of json.loads: an integer too long to convert
        limit = f"more than {sys.get_int_max_str_digits()} digits"  # the interpreter's limit
        raise error(400, f"{what} holds a number of {limit}.") from None
    raise error(400, f"{what} is nested too deeply: at most {MAX_DEPTH} levels.")


def decoded(req: falcon.Request, raw: bytes) -> bytes:
    encoding = (req.get_header("Content-Encoding") or "").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in ("gzip", "x-gzip"):
        raise error(415, "Content-Encoding must be gzip, or absent.")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(raw, MAX_BODY_BYTES + 1)
    except zlib.error:
        raise error(400, "The request body is not valid gzip.") from None
    if len(body) <= MAX_BODY_BYTES and (not inflater.eof or inflater.unused_data):
        raise error(400, "The request body is not valid gzip.")
    return body
