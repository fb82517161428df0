"""The client's exceptions, and the one place an HTTP answer or failure becomes one of them.

A failure is always a `TitenError` carrying the service's own `code` and `message`, so a caller
can show the service's words as they are; the subclasses are the cases a caller can act on.
Import them from `titen.client.rest`, which re-exports them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import httpx2

_CONFLICT = re.compile(r"Resource is leased by another principal until (\S+)\.")


class TitenError(Exception):
    """The request failed: `code` and `message` are the service's, `status` its HTTP status."""

    def __init__(self, code: str, message: str, status: int | None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


class ValidationError(TitenError):
    """400: a field is missing, out of bounds, or refers to something it may not."""


class Unauthorized(TitenError):
    """401: the API key is missing, unknown or revoked."""


class NotFound(TitenError):
    """404: unknown, already ended, or not visible to the caller (indistinguishable on purpose)."""


class LeaseConflict(TitenError):
    """409: another principal holds the resource until `expires_at`, and that is all it says."""

    def __init__(self, code: str, message: str, status: int | None, expires_at: datetime):
        super().__init__(code, message, status)
        self.expires_at = expires_at


class LeaseLost(NotFound):
    """A `with client.lease(...)` block ended, but its lease was no longer there to release."""


class Unreachable(TitenError):
    """No answer (`status` None): nothing listening, a timeout, or a broken connection.

    `sent` is False when the request never reached the service (it could not connect), so it
    certainly was not applied; True when only the answer is missing.
    """

    def __init__(self, code: str, message: str, status: int | None, *, sent: bool = True):
        super().__init__(code, message, status)
        self.sent = sent


def raise_for(response: httpx2.Response) -> None:
    """Raise the exception an error answer stands for; a success passes through.

    A streamed response must have been read (`response.read()`) before it is passed here.
    """
    if response.is_success:
        return
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        raise bad_response(response) from None
    status = response.status_code
    if status == 409 and (held := _CONFLICT.fullmatch(message)):
        raise LeaseConflict(code, message, status, datetime.fromisoformat(held.group(1)))
    kind = {400: ValidationError, 401: Unauthorized, 404: NotFound}.get(status, TitenError)
    raise kind(code, message, status)


def bad_response(response: httpx2.Response) -> TitenError:
    """An answer that is not Titen's JSON, such as a proxy's error page."""
    return TitenError(
        "BAD_RESPONSE",
        f"Unexpected answer from {response.url}: HTTP {response.status_code}, "
        f"{response.text[:200]!r}.",
        response.status_code,
    )


@contextmanager
def transport_errors(url: str) -> Iterator[None]:
    """Turn the HTTP library's connection failures inside the block into `Unreachable`.

    The message says whether the request may have been applied: a failure to connect means it
    was not sent, while a timeout or a dropped connection leaves only the answer missing.
    """
    try:
        yield
    except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
        raise Unreachable(
            "UNREACHABLE", f"Titen is unreachable at {url}: {exc}.", None, sent=False
        ) from exc
    except httpx2.TransportError as exc:
        raise Unreachable(
            "UNREACHABLE",
            f"No answer from Titen at {url} ({type(exc).__name__}: {exc}); "
            "the request may or may not have been applied.",
            None,
        ) from exc
