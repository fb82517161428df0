"""Reading a JSON request body: size, media type, syntax, then its JSON Schema."""

from __future__ import annotations

import json
from typing import Any

import falcon

from titen.api.rest.errors import error
from titen.api.validation import refusal

MAX_BODY_BYTES = 1024 * 1024


class BodyLimit:
    """Falcon middleware: refuse any declared body over the limit before routing."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.content_length is not None and req.content_length > MAX_BODY_BYTES:
            raise error(413)


def read_json(req: falcon.Request, checker: Any) -> dict[str, Any]:
    raw = req.bounded_stream.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise error(413)
    if not req.content_type or req.content_type.split(";")[0].strip().lower() != (
        falcon.MEDIA_JSON
    ):
        raise error(415)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(400, f"The request body is not valid JSON: {exc}.") from None
    refused = refusal(body, checker)
    if refused is not None:
        raise error(400, refused)
    return body
