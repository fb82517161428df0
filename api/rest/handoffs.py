"""The handoff routes: create, the caller's pending inbox (or with scope=organization the
organization's, not for agents), one handoff in any status, and its resolution by its target."""

from __future__ import annotations

from dataclasses import dataclass

import falcon

from titen.api import schemas
from titen.api.rest.auth import principal_of
from titen.api.rest.contract import (
    INSTANT,
    STRING,
    Link,
    answers,
    get,
    listing,
    nullable,
    obj,
    post,
)
from titen.api.rest.errors import error
from titen.api.rest.idempotency import Idempotency
from titen.api.rest.paging import PAGE_QUERY, read_page, single
from titen.api.validation import validator
from titen.domain.handoff import FIELDS, RESOLVED_FIELDS, public_fields
from titen.domain.limits import NAME_LENGTH
from titen.domain.statuses import ACCEPTED, PENDING, REJECTED
from titen.service.handoffs import HandoffService

CREATE = validator(schemas.CREATE_HANDOFF)
RESOLVE = validator(schemas.RESOLVE_HANDOFF)
HANDOFF_ID = "$response.body#/data/handoff_id"
STATUS = {"type": "string", "enum": [PENDING, ACCEPTED, REJECTED]}
ORGANIZATION = "organization"
SCOPE = {
    "type": "string",
    "enum": [ORGANIZATION],
    "description": "organization: every pending handoff of the organization, not the inbox.",
}
INBOX = {"subject_id": schemas.text(NAME_LENGTH)}
IN_ORGANIZATION = {"to_principal": schemas.text(NAME_LENGTH)}
FIELD_SCHEMAS = {
    **dict.fromkeys(("handoff_id", "from_principal", "to_principal", "subject_id"), STRING),
    **dict.fromkeys(("context_id", "checkpoint_id", "message"), nullable(STRING)),
    "status": STATUS,
    "created_at": INSTANT,
    "resolved_at": nullable(INSTANT),
}
INBOX_ITEM = obj({name: FIELD_SCHEMAS[name] for name in FIELDS})
HANDOFF = obj({name: FIELD_SCHEMAS[name] for name in RESOLVED_FIELDS})
"""A handoff in any status, as GET, resolve, the audit and the event log show it."""


@dataclass
class Handoffs:
    contract = post(
        "createHandoff",
        "Hand a subject to another principal of the organization (pending until resolved).",
        status=201,
        body=schemas.CREATE_HANDOFF,
        answer=answers(obj({"handoff_id": STRING, "status": STATUS})),
        idempotent=True,
        links={
            "GetHandoff": Link("getHandoff", {"handoff_id": HANDOFF_ID}),
            "ResolveHandoff": Link("resolveHandoff", {"handoff_id": HANDOFF_ID}),
        },
    ) | get(
        "listInbox",
        "The caller's inbox: pending handoffs addressed to it, oldest first, paged; with "
        "scope=organization, every pending handoff of the organization.",
        query={**PAGE_QUERY, **INBOX, "scope": SCOPE, **IN_ORGANIZATION},
        answer=listing("handoffs", INBOX_ITEM),
        errors=("FORBIDDEN",),
        description="Without `scope`, the inbox: what others handed to the caller, never "
        "what it sent (`subject_id` narrows it). With `scope=organization`, for dispatchers "
        "and operators (an agent gets 403), every pending handoff of the organization, "
        "oldest first (`to_principal` narrows it to one recipient's).",
    )

    handoffs: HandoffService
    idempotency: Idempotency

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.idempotency.post(
            req,
            resp,
            CREATE,
            201,
            self.handoffs.create,
            lambda handoff: {"data": {"handoff_id": handoff.handoff_id, "status": handoff.status}},
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        scope = single(req.params, "scope")
        if scope not in (None, ORGANIZATION):
            raise error(400, f"scope must be {ORGANIZATION}, or left out for the inbox.")
        page = read_page(req, INBOX if scope is None else IN_ORGANIZATION, also=("scope",))
        read = self.handoffs.pending if scope is None else self.handoffs.pending_in_organization
        rows = read(principal_of(req), after=page.after, limit=page.limit + 1, **page.filters)
        resp.media = page.answer("handoffs", rows, lambda row: row.position, lambda row: row.fields)


@dataclass
class HandoffItem:
    contract = get(
        "getHandoff",
        "One handoff in any status, for its sender and its target.",
        answer=answers(HANDOFF),
    )

    handoffs: HandoffService

    def on_get(self, req: falcon.Request, resp: falcon.Response, handoff_id: str) -> None:
        resp.media = {"data": public_fields(self.handoffs.get(principal_of(req), handoff_id))}


@dataclass
class HandoffResolution:
    contract = post(
        "resolveHandoff",
        "Accept or reject a pending handoff, once, as its target.",
        body=schemas.RESOLVE_HANDOFF,
        answer=answers(HANDOFF),
        idempotent=True,
    )

    handoffs: HandoffService
    idempotency: Idempotency

    def on_post(self, req: falcon.Request, resp: falcon.Response, handoff_id: str) -> None:
        self.idempotency.post(
            req,
            resp,
            RESOLVE,
            200,
            lambda caller, keep, status: self.handoffs.resolve(
                caller, handoff_id, accept=status == ACCEPTED, keep=keep
            ),
            lambda handoff: {"data": public_fields(handoff)},
        )
