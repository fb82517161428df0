"""GET /v1/events (pull, with long-poll), GET /v1/events/stream (Server-Sent Events), and
POST /v1/events/tickets (for a browser's EventSource, which cannot send a key; not idempotent:
a replay would store a credential). Streams and waiting long-polls take a subscriber slot and
wait on the follower's signal, never on a database connection; revoking their key (or their
ticket's) ends them in every server process (service/revocations.py)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import falcon

from titen.api.rest.auth import TICKET, key_of, principal_of
from titen.api.rest.connections import WATCH_CLIENT
from titen.api.rest.contract import (
    EVENT_STREAM,
    INSTANT,
    STRING,
    TOO_MANY_SUBSCRIBERS,
    answers,
    array,
    fields_of,
    get,
    obj,
    post,
    ref,
)
from titen.api.rest.errors import OUTCOME_UNKNOWN, error
from titen.api.rest.handoffs import HANDOFF
from titen.api.rest.methods import is_head
from titen.api.rest.metrics import SUBSCRIBERS
from titen.api.rest.paging import (
    LIMIT,
    decimal,
    decode_cursor,
    encode_cursor,
    read_limit,
    reject_unknown,
    single,
)
from titen.api.rest.settings import ServerSettings
from titen.domain.clock import iso
from titen.domain.events import PUBLISHED
from titen.domain.lease import Holding
from titen.domain.published import LEASE_ACQUIRED
from titen.service import request_budget
from titen.service.keys import Principal
from titen.service.read_models import Published, RecentEvents
from titen.service.revocations import Revocations
from titen.service.tickets import Tickets

MAX_WAIT_SECONDS = 30
STREAM_BATCH = 500
ADVICE = "close one, or poll GET /v1/events without wait."
AFTER = {
    "type": "string",
    "description": "Resume after this cursor (an event's `cursor`, a `next_cursor`); `latest` "
    "for the live tail; absent for the beginning.",
}
TYPES = {
    "type": "string",
    "description": f"Comma-separated event types to keep, of: {', '.join(PUBLISHED)}.",
}
LEASE_DATA = obj(fields_of(Holding, leave=("purpose",)))


def _event(kind: str) -> dict[str, Any]:
    """A CloudEvent of one type with the cursor to resume after it."""
    return obj(
        {
            "specversion": {"type": "string", "enum": ["1.0"]},
            "id": STRING,
            "source": STRING,
            "type": {"type": "string", "enum": [kind]},
            "time": INSTANT,
            "subject": STRING,
            "datacontenttype": {"type": "string", "enum": ["application/json"]},
            "data": LEASE_DATA if kind == LEASE_ACQUIRED else HANDOFF,
            "cursor": STRING,
        }
    )


COMPONENTS = {kind: kind.title().replace(".", "") + "Event" for kind in PUBLISHED}
"""Each event type's schema name: `lease.acquired` → `LeaseAcquiredEvent`."""
EVENT_SCHEMAS = {COMPONENTS[kind]: _event(kind) for kind in PUBLISHED}
EVENT = {
    "oneOf": [ref(name) for name in COMPONENTS.values()],
    "discriminator": {
        "propertyName": "type",
        "mapping": {kind: ref(name)["$ref"] for kind, name in COMPONENTS.items()},
    },
}
"""One schema per type, told apart by `type` (so a typed client narrows `data` by it)."""
FRAME = obj(
    {
        "id": STRING,
        "event": {"type": "string", "enum": list(PUBLISHED)},
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": EVENT},
    }
)


@dataclass
class Subscribers:
    """One process's streams and waiting long-polls, each holding a thread: their slots (a
    limit, 503, and quotas per organization and per principal, 429 TOO_MANY_SUBSCRIBERS,
    checked first so that a noisy organization is told it is the one over), their heartbeat,
    and what ends them."""

    settings: ServerSettings
    revocations: Revocations
    recent: RecentEvents
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _held: Counter[tuple[str, ...]] = field(default_factory=Counter)  # by (), (org,), (org, name)

    @contextmanager
    def held(self, req: falcon.Request, principal: Principal) -> Iterator[Subscription]:
        """A slot for the request's principal while the block runs."""
        org, name, limits = principal.organization, principal.name, self.settings
        scopes = Counter([(), (org,), (org, name)])  # the limit, the org's quota, the principal's
        with self._lock:
            if self._held[org, name] >= limits.max_subscribers_per_principal:
                raise _over(f"This principal already holds {limits.max_subscribers_per_principal}")
            if self._held[org,] >= limits.max_subscribers_per_org:
                raise _over(f"This organization already holds {limits.max_subscribers_per_org}")
            if self._held[()] >= limits.max_subscribers:
                raise error(
                    503,
                    f"Too many open subscriptions on this server (limit {limits.max_subscribers}); "
                    "retry later or poll GET /v1/events without wait.",
                )
            self._held += scopes
        self.recent.subscribe(org)
        try:
            with SUBSCRIBERS.track_inprogress(), self.revocations.watch(*key_of(req)) as watch:
                watch_client = req.env.get(WATCH_CLIENT)  # wakes waiters when the client goes
                gone = watch_client(self.recent.wake) if watch_client else lambda: False
                yield Subscription(self.recent, principal, watch.revoked, gone)
        finally:
            self.recent.unsubscribe(org)
            with self._lock:
                self._held -= scopes  # drops the scopes now at 0


def _over(holds: str) -> falcon.HTTPError:
    message = f"{holds} open subscriptions on this server, its quota; {ADVICE}"
    return error(429, message, TOO_MANY_SUBSCRIBERS)


@dataclass(frozen=True)
class Subscription:
    """A held slot's reads, until it has ended: its key revoked, or its client gone."""

    recent: RecentEvents
    principal: Principal
    revoked: threading.Event
    gone: Callable[[], bool]

    def ended(self) -> bool:
        return self.revoked.is_set() or self.gone()

    def next(
        self, after: int, types: tuple[str, ...], limit: int, seconds: float
    ) -> list[Published]:
        """The events after `after`, waiting up to `seconds` for the first; none once ended."""
        recent, organization = self.recent, self.principal.organization
        deadline = time.monotonic() + seconds
        while not self.ended():
            seen = recent.version(organization)
            request_budget.start()  # a fresh deadline: the wait was not on the database
            events = recent.read(organization, after, types, limit, self.principal.party)
            if events or (left := deadline - time.monotonic()) <= 0:
                return events
            recent.wait_past(organization, seen, left, self.ended)
        return []


@dataclass
class Events:
    contract = get(
        "listEvents",
        "The organization's committed events after a cursor, oldest first (long-polls "
        "with `wait`); an agent's key reads those it is party to.",
        query={
            "after": AFTER,
            "types": TYPES,
            "limit": LIMIT,
            "wait": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS},
        },
        answer=answers(obj({"events": array(EVENT), "next_cursor": STRING})),
        errors=(TOO_MANY_SUBSCRIBERS,),
        tickets=True,
        components=EVENT_SCHEMAS,
    )

    recent_events: RecentEvents
    subscribers: Subscribers

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        principal = principal_of(req)
        reject_unknown(req.params, {"after", "types", "limit", "wait", TICKET})
        after = _after(req, single(req.params, "after"), self.recent_events)
        types, limit, wait = _types(req), read_limit(req.params), _wait(req)
        events = self.recent_events.read_committed(
            principal.organization, after, types, limit, principal.party
        )
        if not events and wait > 0:
            with self.subscribers.held(req, principal) as subscription:
                events = subscription.next(after, types, limit, wait)
                if subscription.revoked.is_set():
                    raise error(401, "The API key was revoked.")
        resp.media = {
            "data": {
                "events": [e.served() for e in events],
                "next_cursor": events[-1].cursor if events else encode_cursor(req, after),
            }
        }


@dataclass
class EventStream:
    contract = get(
        "streamEvents",
        "The organization's committed events as Server-Sent Events, each frame's `id` its cursor; "
        "resume with Last-Event-ID or `after`. An agent's key reads those it is party to.",
        query={"after": AFTER, "types": TYPES},
        headers=(
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "description": "Resume after this cursor; when present it wins over "
                "`after` (EventSource reconnects to the same URL with it).",
                "schema": STRING,
            },
        ),
        answer=FRAME,
        media=EVENT_STREAM,
        errors=(TOO_MANY_SUBSCRIBERS,),
        tickets=True,
        components=EVENT_SCHEMAS,
    )

    recent_events: RecentEvents
    subscribers: Subscribers

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        principal = principal_of(req)
        reject_unknown(req.params, {"after", "types", TICKET})
        # EventSource reconnects to its URL, `after` and all, naming its last frame in the header.
        cursor = req.get_header("Last-Event-ID") or single(req.params, "after")
        after, types = _after(req, cursor, self.recent_events), _types(req)
        resp.content_type = "text/event-stream"
        resp.set_header("Cache-Control", "no-cache")
        if is_head(req):
            resp.stream = iter(())  # no slot, and, as for a stream, no Content-Length
            return
        frames = self._frames(req, principal, after, types)
        next(frames)  # holds the slot (or refuses) now: close() unwinds only a started generator
        resp.stream = frames

    def _frames(
        self, req: falcon.Request, principal: Principal, after: int, types: tuple[str, ...]
    ) -> Generator[bytes, None, None]:
        """An empty item once the slot is held, then frames until the key it was opened with is
        revoked or its client goes away; a comment line after each quiet heartbeat, for proxies."""
        with self.subscribers.held(req, principal) as subscription:
            yield b""
            yield b": connected\n\n"
            heartbeat = self.subscribers.settings.heartbeat_seconds
            while not subscription.ended():
                events = subscription.next(after, types, STREAM_BATCH, heartbeat)
                for event in events:
                    yield _frame(event)
                    after = event.position
                if not events and not subscription.ended():
                    yield b": heartbeat\n\n"


def _frame(event: Published) -> bytes:
    served = event.served()
    frame = f"id: {served['cursor']}\nevent: {served['type']}\ndata: {json.dumps(served)}\n\n"
    return frame.encode()


def _after(req: falcon.Request, cursor: str | None, recent: RecentEvents) -> int:
    """A resume position: none is the beginning, `latest` the live tail."""
    if not cursor:
        return 0
    if cursor == "latest":
        return recent.log.last_position()
    return decode_cursor(req, cursor, "after")


def _types(req: falcon.Request) -> tuple[str, ...]:
    raw = single(req.params, "types")
    if raw is None:
        return ()
    types = tuple(dict.fromkeys(t.strip() for t in raw.split(",")))
    if any(t not in PUBLISHED for t in types):
        raise error(400, f"types must be a comma-separated list of: {', '.join(PUBLISHED)}.")
    return types


def _wait(req: falcon.Request) -> float:
    raw = single(req.params, "wait")
    value = 0 if raw is None else decimal(raw)
    if value is None or not 0 <= value <= MAX_WAIT_SECONDS:
        raise error(400, f"wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS}.")
    return value


@dataclass
class EventTickets:
    contract = post(
        "createEventTicket",
        "A ticket that opens the event log to a browser: `?ticket=` on GET /v1/events and "
        "GET /v1/events/stream, for 10 minutes, until its key is revoked.",
        answer=answers(obj({"ticket": STRING, "expires_at": INSTANT})),
        status=201,
        errors=(OUTCOME_UNKNOWN,),
        description="A ticket is read-only and accepted nowhere else; it acts as the key "
        "that asked for it (its principal and organization), and revoking that key ends "
        "it and the streams opened with it (docs/event-log.md).",
    )

    tickets: Tickets

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        issued = self.tickets.issue(key_of(req)[0])
        resp.status = falcon.HTTP_201
        resp.set_header("Cache-Control", "no-store")
        resp.media = {"data": {"ticket": issued.ticket, "expires_at": iso(issued.expires_at)}}
