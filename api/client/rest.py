"""A small typed client for Titen's REST API, shared by the MCP server and any Python agent.

Every HTTP call in the project's client-side code goes through `TitenClient._request`, so
authentication, timeouts and the mapping of failures to exceptions exist once. A failure is
always a `TitenError` carrying the service's own `code` and `message`; the subclasses let a
caller catch the cases it can act on (a held lease, a missing id, a refused key, no server).
The exceptions live in `titen.client.errors` and the returned records in `titen.client.types`;
everything a caller needs is importable from `titen.client`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote
from uuid import uuid4

import httpx2

from titen.client.errors import (
    LeaseLost,
    NotFound,
    TitenError,
    Unreachable,
    bad_response,
    raise_for,
    transport_errors,
)
from titen.client.types import (
    CurrentLease,
    EventPage,
    Handoff,
    HandoffCreated,
    InboxPage,
    Lease,
    LeasePage,
    current_lease_from,
    handoff_from,
    instant,
)

DEFAULT_URL = "http://127.0.0.1:8787"
DEFAULT_TIMEOUT = 10.0
STREAM_READ_TIMEOUT = (
    60.0  # a live stream sends a heartbeat every 15 s; silence this long is a drop
)
RETRIES = 3
"""Further attempts of a call that got no answer, when running it again is safe."""
BACKOFF_SECONDS = 0.25
"""The wait before the first retry; it doubles for each further one, up to MAX_BACKOFF_SECONDS."""
MAX_BACKOFF_SECONDS = 2.0
IDEMPOTENCY_KEY = "Idempotency-Key"
KEY_IN_USE = "IDEMPOTENCY_KEY_IN_USE"
OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"
REPEATED = (KEY_IN_USE, OUTCOME_UNKNOWN)
"""The refusals a keyed POST repeats with its key: its earlier attempt is still running, or
the service could not tell whether it was saved (the repeat learns it)."""


class HeldLease:
    """The lease a `with client.lease(...)` block holds; `reacquire` extends it under a new id.

    There is no renew route: acquiring again supersedes the old lease and returns a new id.
    Going through `reacquire` keeps the id current, so the block releases the lease it holds.
    """

    def __init__(self, client: TitenClient, resource: tuple[str, str], purpose: str, lease: Lease):
        self._client = client
        self._resource = resource
        self._purpose = purpose
        self.lease = lease

    @property
    def lease_id(self) -> str:
        return self.lease.lease_id

    @property
    def expires_at(self) -> datetime:
        return self.lease.expires_at

    @property
    def fencing_token(self) -> int:
        return self.lease.fencing_token

    def reacquire(self, ttl_seconds: int) -> Lease:
        """Start a new term of `ttl_seconds` from now (the old lease id stops existing)."""
        resource_type, resource_id = self._resource
        self.lease = self._client.acquire_lease(
            resource_type, resource_id, purpose=self._purpose, ttl_seconds=ttl_seconds
        )
        return self.lease


class TitenClient:
    """Synchronous and thread-safe; close it (or use it as a context manager) when done."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = RETRIES,
    ):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"Titen URL must start with http:// or https://, not {url!r}.")
        self.url = url.rstrip("/")
        self.retries = retries
        self._http = httpx2.Client(
            base_url=self.url,
            headers={"authorization": f"Bearer {api_key}"},
            timeout=timeout,
        )

    @classmethod
    def from_env(cls, url: str | None = None, **options: Any) -> TitenClient:
        """From `TITEN_URL` (default http://127.0.0.1:8787) and `TITEN_API_KEY`."""
        api_key = os.environ.get("TITEN_API_KEY")
        if not api_key:
            raise ValueError("TITEN_API_KEY is not set: create one with `titen keys create`.")
        return cls(url or os.environ.get("TITEN_URL") or DEFAULT_URL, api_key, **options)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TitenClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def acquire_lease(
        self, resource_type: str, resource_id: str, *, purpose: str, ttl_seconds: int
    ) -> Lease:
        """Claim a resource; raises `LeaseConflict` while another principal holds it."""
        body = {
            "resource_type": resource_type,
            "resource_id": resource_id,
            "purpose": purpose,
            "ttl_seconds": ttl_seconds,
        }
        data = self._request("POST", "/v1/leases", json=body)
        return Lease(data["lease_id"], instant(data["expires_at"]), data["fencing_token"])

    def get_lease(self, lease_id: str) -> CurrentLease:
        """The lease while it is still held; `NotFound` once released, superseded or replaced.

        Only its holder and the organization's operators see it. Ask right before the step that
        must not run twice, and pass `fencing_token` on to what that step writes to.
        """
        return current_lease_from(self._request("GET", f"/v1/leases/{_segment(lease_id)}"))

    def held_leases(
        self,
        *,
        resource_type: str | None = None,
        holder: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> LeasePage:
        """One page of the organization's unreleased leases, newest first (an agent's own only:
        dispatchers and operators see the organization's)."""
        wanted = {"resource_type": resource_type, "holder": holder, "limit": limit}
        params = {name: value for name, value in {**wanted, "cursor": cursor}.items() if value}
        data = self._request("GET", "/v1/leases", params=params)
        return LeasePage([current_lease_from(item) for item in data["leases"]], data["next_cursor"])

    def release_lease(self, lease_id: str) -> datetime:
        """Release and return `released_at`; `NotFound` if it was already released or replaced."""
        return instant(self._request("DELETE", f"/v1/leases/{_segment(lease_id)}")["released_at"])

    @contextmanager
    def lease(
        self, resource_type: str, resource_id: str, *, purpose: str, ttl_seconds: int
    ) -> Iterator[HeldLease]:
        """Hold a lease for the block and release it on the way out, also on an exception.

        If the block raised, a failed release never replaces its exception: it is added to it
        as a note. If the block finished, a 404 raises `LeaseLost` (the lease expired and was
        taken, was superseded by an acquire outside `reacquire`, or an operator released it),
        and any other failure to release is raised as is.
        """
        held = HeldLease(
            self,
            (resource_type, resource_id),
            purpose,
            self.acquire_lease(
                resource_type, resource_id, purpose=purpose, ttl_seconds=ttl_seconds
            ),
        )
        try:
            yield held
        except BaseException as exc:
            try:
                self.release_lease(held.lease_id)
            except TitenError as failure:
                exc.add_note(f"Releasing lease {held.lease_id} failed too: {failure}")
            raise
        try:
            self.release_lease(held.lease_id)
        except NotFound as lost:
            raise LeaseLost(
                lost.code,
                f"Lease {held.lease_id} on {resource_type}/{resource_id} was no longer held when "
                "the block ended: it expired and was taken, was superseded, or was released.",
                lost.status,
            ) from lost

    def create_handoff(
        self,
        to_principal: str,
        subject_id: str,
        *,
        message: str | None = None,
        context_id: str | None = None,
        checkpoint_id: str | None = None,
    ) -> HandoffCreated:
        """Hand `subject_id` to another principal of the organization; it starts pending."""
        optional = {"message": message, "context_id": context_id, "checkpoint_id": checkpoint_id}
        body = {"to_principal": to_principal, "subject_id": subject_id}
        body.update({name: value for name, value in optional.items() if value is not None})
        data = self._request("POST", "/v1/handoffs", json=body)
        return HandoffCreated(data["handoff_id"], data["status"])

    def inbox(
        self, *, limit: int | None = None, cursor: str | None = None, subject_id: str | None = None
    ) -> InboxPage:
        """One page of the pending handoffs addressed to the caller, oldest first."""
        wanted = {"limit": limit, "cursor": cursor, "subject_id": subject_id}
        params = {name: value for name, value in wanted.items() if value is not None}
        data = self._request("GET", "/v1/handoffs", params=params)
        return InboxPage([handoff_from(item) for item in data["handoffs"]], data["next_cursor"])

    def organization_handoffs(
        self,
        *,
        to_principal: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> InboxPage:
        """One page of the organization's pending handoffs, oldest first (dispatchers and
        operators; an agent's key is refused with `TitenError` 403)."""
        wanted = {"to_principal": to_principal, "limit": limit, "cursor": cursor}
        params = {name: value for name, value in wanted.items() if value is not None}
        data = self._request("GET", "/v1/handoffs", params={"scope": "organization", **params})
        return InboxPage([handoff_from(item) for item in data["handoffs"]], data["next_cursor"])

    def iter_inbox(
        self, *, subject_id: str | None = None, page_size: int = 50
    ) -> Iterator[Handoff]:
        """Every pending handoff addressed to the caller, following `next_cursor` page by page."""
        cursor = None
        while True:
            page = self.inbox(limit=page_size, cursor=cursor, subject_id=subject_id)
            yield from page.handoffs
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get_handoff(self, handoff_id: str) -> Handoff:
        """One handoff in any status; only its sender and its target can see it."""
        return handoff_from(self._request("GET", f"/v1/handoffs/{_segment(handoff_id)}"))

    def resolve_handoff(self, handoff_id: str, status: Literal["accepted", "rejected"]) -> Handoff:
        """Accept or reject, as the target, once: a second resolve raises `NotFound`."""
        data = self._request(
            "POST", f"/v1/handoffs/{_segment(handoff_id)}/resolve", json={"status": status}
        )
        return handoff_from(data)

    def events(
        self,
        *,
        after: str | None = None,
        types: Sequence[str] = (),
        limit: int | None = None,
        wait: float = 0,
    ) -> EventPage:
        """One page of the organization's committed events after a cursor (`latest`: from now).

        With `wait`, the service holds the request until a matching event commits (long-poll).
        """
        wanted = {"after": after, "types": ",".join(types) or None, "limit": limit, "wait": wait}
        params = {name: value for name, value in wanted.items() if value}
        data = self._request("GET", "/v1/events", params=params, timeout=wait + DEFAULT_TIMEOUT)
        return EventPage(data["events"], data["next_cursor"])

    def follow(
        self, *, after: str | None = None, types: Sequence[str] = (), wait: float = 30
    ) -> Iterator[dict[str, Any]]:
        """Every event after `after`, without end, by long-polling from each `next_cursor`."""
        while True:
            page = self.events(after=after, types=types, wait=wait)
            yield from page.events
            after = page.next_cursor

    def stream(
        self, *, after: str | None = None, types: Sequence[str] = (), retries: int = 5
    ) -> Iterator[dict[str, Any]]:
        """Every event after `after` over Server-Sent Events, without end.

        A dropped connection is resumed from the last event received (`Last-Event-ID`), so
        nothing is missed or repeated; after `retries` failed reconnections in a row the
        `Unreachable` error is raised.
        """
        failures = 0
        while True:
            try:
                for event in self._stream_once(after, types):
                    failures = 0
                    after = event["cursor"]
                    yield event
            except Unreachable:
                failures += 1
                if failures > retries:
                    raise
                time.sleep(min(2.0**failures / 10, 5.0))

    def _stream_once(self, after: str | None, types: Sequence[str]) -> Iterator[dict[str, Any]]:
        headers = {"last-event-id": after} if after else {}
        params = {"types": ",".join(types)} if types else {}
        timeout = httpx2.Timeout(DEFAULT_TIMEOUT, read=STREAM_READ_TIMEOUT)
        with (
            transport_errors(self.url),
            self._http.stream(
                "GET", "/v1/events/stream", params=params, headers=headers, timeout=timeout
            ) as response,
        ):
            if not response.is_success:
                response.read()
                raise_for(response)
            for line in response.iter_lines():
                if line.startswith("data: "):
                    yield json.loads(line.removeprefix("data: "))

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Make one call and return the answer's `data`, or raise the matching `TitenError`.

        A call that got no answer is sent again, up to `retries` times with backoff, when that
        is safe: a GET reads only; every POST changes state but carries an Idempotency-Key, fresh
        for the call and the same on each attempt, so the service runs it once and answers a
        repeat from the first answer; any call that never reached the service. A DELETE whose
        answer was lost is not repeated (a second release finds nothing). A POST whose key is
        still in use by its own earlier attempt (409 IDEMPOTENCY_KEY_IN_USE), or whose outcome
        the service could not learn (503 OUTCOME_UNKNOWN), waits and repeats with its key.
        """
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        if method == "POST":
            extra["headers"] = {IDEMPOTENCY_KEY: uuid4().hex}
        attempt = 0
        while True:
            try:
                return self._attempt(method, path, json=json, params=params, **extra)
            except Unreachable as failure:
                if attempt == self.retries or (failure.sent and method not in ("GET", "POST")):
                    raise
            except TitenError as refused:
                if attempt == self.retries or method != "POST" or refused.code not in REPEATED:
                    raise
            time.sleep(min(BACKOFF_SECONDS * 2**attempt, MAX_BACKOFF_SECONDS))
            attempt += 1

    def _attempt(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        """Send one request; the answer's `data`, or the matching `TitenError`."""
        with transport_errors(self.url):
            response = self._http.request(method, path, **options)
        raise_for(response)
        try:
            return response.json()["data"]
        except (ValueError, KeyError, TypeError):
            raise bad_response(response) from None


def _segment(identifier: str) -> str:
    """An id as one path segment, so a stray `/` or `?` cannot reach another route."""
    return quote(identifier, safe="")
