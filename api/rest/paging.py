"""Query-string paging for list routes: `limit`, an opaque `cursor`, and named filters. A cursor
is sealed with the store's key (domain/cursors.py): a mangled or made-up one is a 400, never a
silently different page."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import falcon

from titen.api.rest.errors import error
from titen.api.schemas import SINGLE_LINE
from titen.api.validation import cut
from titen.domain.cursors import Cursors

T = TypeVar("T")
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
LIMIT = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}
PAGE_QUERY: dict[str, dict[str, Any]] = {
    "limit": LIMIT,
    "cursor": {"type": "string", "description": "The previous page's next_cursor."},
}


@dataclass(frozen=True)
class Page:
    limit: int
    after: int  # resume after this position (0: from the start)
    filters: dict[str, str | None]  # each filter named, None when not given
    of_log: bool
    cursors: Cursors

    def answer(
        self,
        name: str,
        found: list[T],
        position: Callable[[T], int],
        show: Callable[[T], Any],
    ) -> dict[str, Any]:
        """`{"data": {name: [...], "next_cursor"}}` of `found` (read with `limit + 1`); the
        cursor is None at the end."""
        shown = found[: self.limit]
        more = len(found) > self.limit
        cursor = self.cursors.seal(position(shown[-1]), of_log=self.of_log) if more else None
        return {"data": {name: [show(item) for item in shown], "next_cursor": cursor}}


@dataclass
class StoreCursors:
    """Middleware: gives each request the store's cursors."""

    cursors: Cursors

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.cursors = self.cursors


def read_page(
    req: falcon.Request,
    filters: Mapping[str, dict[str, Any]] = {},
    *,
    of_log: bool = True,
    also: tuple[str, ...] = (),
) -> Page:
    """Parse the query string, the filters by their schemas as the contract publishes them
    (`of_log`: the cursor stands for a log position, see `Cursors.open`; `also`: parameters
    the route reads itself)."""
    params = req.params
    reject_unknown(params, {"limit", "cursor", *filters, *also})
    cursor = single(params, "cursor")
    chosen = {name: _filter(params, name, schema) for name, schema in filters.items()}
    return Page(
        limit=read_limit(params),
        after=0 if cursor is None else decode_cursor(req, cursor, of_log=of_log),
        filters=chosen,
        of_log=of_log,
        cursors=req.context.cursors,
    )


def reject_unknown(params: Mapping[str, str | list[str]], allowed: set[str]) -> None:
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise error(400, f"Unknown query parameter: {cut(', '.join(unknown))}.")


def read_limit(params: Mapping[str, str | list[str]]) -> int:
    text = single(params, "limit")
    if text is None:
        return DEFAULT_LIMIT
    if not re.fullmatch(r"[0-9]{1,4}", text) or not 1 <= int(text) <= MAX_LIMIT:
        raise error(400, f"limit must be an integer from 1 to {MAX_LIMIT}.")
    return int(text)


def decode_cursor(
    req: falcon.Request, cursor: str, name: str = "cursor", *, of_log: bool = True
) -> int:
    """The position a cursor given as `name` stands for; 400 if it is no cursor we made."""
    position = req.context.cursors.open(cursor, of_log=of_log)
    if position is None:
        raise error(400, f"{name} is not valid: pass next_cursor from the previous page.")
    return position


def encode_cursor(req: falcon.Request, position: int, *, of_log: bool = True) -> str:
    return req.context.cursors.seal(position, of_log=of_log)


ASCII_DECIMAL = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")
"""A number in a query string: ASCII digits, an optional fraction, nothing else. Python's own
parsers also take `1_0`, spaces, `1e1`, `inf` and digits of any script (U+0661)."""


def decimal(text: str) -> float | None:
    """The number `text` writes, or None when it is not an ASCII decimal."""
    return float(text) if ASCII_DECIMAL.fullmatch(text) else None


def single(params: Mapping[str, str | list[str]], name: str) -> str | None:
    value = params.get(name)
    if isinstance(value, list):
        raise error(400, f"{cut(name)} must be given once.")
    return value


def _filter(params: Mapping[str, str | list[str]], name: str, schema: dict[str, Any]) -> str | None:
    value = single(params, name)
    if value is None:
        return None
    if not value:
        raise error(400, f"{name} must not be empty.")
    max_length = schema.get("maxLength", len(value))
    if len(value) > max_length:
        raise error(400, f"{name} must be at most {max_length} characters.")
    if not re.fullmatch(SINGLE_LINE, value):
        raise error(400, f"{name} must not contain control characters.")
    return value
