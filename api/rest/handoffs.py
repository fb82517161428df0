"""The handoff routes: create, the caller's pending inbox, one handoff, and its resolution.

POST /v1/handoffs                        create a pending handoff to another principal
GET  /v1/handoffs                        the caller's pending inbox, oldest first, paged
GET  /v1/handoffs/{handoff_id}           one handoff in any status, for its sender and target
POST /v1/handoffs/{handoff_id}/resolve   accept or reject, once, as the target
"""

from __future__ import annotations

import falcon

from titen.api import schemas
from titen.api.rest.auth import principal_of
from titen.api.rest.body import read_json, validator
from titen.api.rest.paging import encode_cursor, read_page
from titen.domain.handoff import public_fields
from titen.domain.limits import NAME_LENGTH
from titen.domain.statuses import ACCEPTED
from titen.service.handoffs import HandoffService

CREATE = validator(schemas.CREATE_HANDOFF)
RESOLVE = validator(schemas.RESOLVE_HANDOFF)


class Handoffs:
    def __init__(self, handoffs: HandoffService):
        self.handoffs = handoffs

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_json(req, CREATE)
        handoff = self.handoffs.create(
            principal_of(req),
            to_principal=body["to_principal"],
            subject_id=body["subject_id"],
            context_id=body.get("context_id"),
            checkpoint_id=body.get("checkpoint_id"),
            message=body.get("message"),
        )
        resp.status = falcon.HTTP_201
        resp.media = {"data": {"handoff_id": handoff.handoff_id, "status": handoff.status}}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The caller's inbox: what others handed to it, never what it sent."""
        page = read_page(req, filters={"subject_id": NAME_LENGTH})
        rows = self.handoffs.pending(
            principal_of(req),
            after=page.after,
            limit=page.limit + 1,
            subject_id=page.filters.get("subject_id"),
        )
        shown = rows[: page.limit]
        more = len(rows) > page.limit
        resp.media = {
            "data": {
                "handoffs": [row.fields for row in shown],
                "next_cursor": encode_cursor(shown[-1].position) if more else None,
            }
        }


class HandoffItem:
    def __init__(self, handoffs: HandoffService):
        self.handoffs = handoffs

    def on_get(self, req: falcon.Request, resp: falcon.Response, handoff_id: str) -> None:
        resp.media = {"data": public_fields(self.handoffs.get(principal_of(req), handoff_id))}


class HandoffResolution:
    def __init__(self, handoffs: HandoffService):
        self.handoffs = handoffs

    def on_post(self, req: falcon.Request, resp: falcon.Response, handoff_id: str) -> None:
        body = read_json(req, RESOLVE)
        handoff = self.handoffs.resolve(
            principal_of(req), handoff_id, accept=body["status"] == ACCEPTED
        )
        resp.media = {"data": public_fields(handoff)}
