"""POST /v1/events/tickets: a ticket for a browser's EventSource, which cannot send a key.

Not idempotent: a replay would store the ticket, a credential, with the answer; a retry's second
ticket costs nothing (the first expires unused).
"""

from __future__ import annotations

from dataclasses import dataclass

import falcon

from titen.api.rest.auth import key_of
from titen.api.rest.contract import INSTANT, STRING, Operation, answers, obj, operations
from titen.api.rest.errors import OUTCOME_UNKNOWN
from titen.domain.clock import iso
from titen.service.tickets import Tickets

TICKET_ANSWER = obj({"ticket": STRING, "expires_at": INSTANT})


@dataclass
class EventTickets:
    contract = operations(
        post=Operation(
            "createEventTicket",
            "A ticket that opens the event log to a browser: `?ticket=` on GET /v1/events and "
            "GET /v1/events/stream, for 10 minutes, until its key is revoked.",
            answer=answers(TICKET_ANSWER),
            status=201,
            errors=(OUTCOME_UNKNOWN,),
            description="A ticket is read-only and accepted nowhere else; it acts as the key "
            "that asked for it (its principal and organization), and revoking that key ends "
            "it and the streams opened with it (docs/event-log.md).",
        )
    )

    tickets: Tickets

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        hashed_key, _ = key_of(req)
        issued = self.tickets.issue(hashed_key)
        resp.status = falcon.HTTP_201
        resp.set_header("Cache-Control", "no-store")
        resp.media = {"data": {"ticket": issued.ticket, "expires_at": iso(issued.expires_at)}}
