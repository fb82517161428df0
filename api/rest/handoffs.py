"""The handoff routes: create, the caller's pending inbox, one handoff, and its resolution.

POST /v1/handoffs                        create a pending handoff to another principal
GET  /v1/handoffs                        the caller's pending inbox, oldest first, paged
GET  /v1/handoffs/{handoff_id}           one handoff in any status, for its sender and target
POST /v1/handoffs/{handoff_id}/resolve   accept or reject, once, as the target
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import falcon

from titen.api.rest.auth import principal_of
from titen.api.rest.body import obj, read_json, text
from titen.api.rest.errors import error
from titen.api.rest.paging import encode_cursor, read_page
from titen.domain.clock import iso
from titen.domain.handoff import ACCEPTED, REJECTED, Handoff, public_id
from titen.domain.history import HandoffRecord
from titen.domain.ids import HANDOFF, to_uuid
from titen.projections.inbox import PendingHandoff
from titen.service.bootstrap import Services

NAME_LENGTH = 200
MESSAGE_LENGTH = 4000
CREATE = obj(
    {
        "to_principal": text(NAME_LENGTH),
        "subject_id": text(NAME_LENGTH),
        "context_id": text(NAME_LENGTH),
        "checkpoint_id": text(NAME_LENGTH),
        "message": text(MESSAGE_LENGTH, multiline=True),
    },
    required=["to_principal", "subject_id"],
)
RESOLVE = obj({"status": {"type": "string", "enum": [ACCEPTED, REJECTED]}}, required=["status"])


class Handoffs:
    def __init__(self, services: Services):
        self.services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_json(req, CREATE)
        caller = principal_of(req)
        committed = self.services.app.create_handoff(
            organization=caller.organization,
            from_principal=caller.name,
            to_principal=body["to_principal"],
            subject_id=body["subject_id"],
            context_id=body.get("context_id"),
            checkpoint_id=body.get("checkpoint_id"),
            message=body.get("message"),
            is_principal=lambda name: self.services.keys.is_principal(caller.organization, name),
        )
        self.services.projector.reflect(committed.position)
        resp.status = falcon.HTTP_201
        handoff = committed.value
        resp.media = {"data": {"handoff_id": handoff.handoff_id, "status": handoff.status}}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The caller's inbox: what others handed to it, never what it sent."""
        page = read_page(req, filters={"subject_id": NAME_LENGTH})
        caller = principal_of(req)
        rows = self.services.inbox.pending(
            caller.organization,
            caller.name,
            after=page.after,
            limit=page.limit + 1,
            subject_id=page.filters.get("subject_id"),
        )
        shown = rows[: page.limit]
        more = len(rows) > page.limit
        resp.media = {
            "data": {
                "handoffs": [_pending(row) for row in shown],
                "next_cursor": encode_cursor(shown[-1].position) if more else None,
            }
        }


class HandoffItem:
    def __init__(self, services: Services):
        self.services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response, handoff_id: str) -> None:
        caller = principal_of(req)
        missing = f"No handoff {handoff_id}."
        handoff = self.services.app.get_handoff(_key(handoff_id, missing))
        if not handoff.visible_to(caller.organization, caller.name):
            raise error(404, missing)
        resp.media = {"data": handoff_view(handoff)}


class HandoffResolution:
    def __init__(self, services: Services):
        self.services = services

    def on_post(self, req: falcon.Request, resp: falcon.Response, handoff_id: str) -> None:
        body = read_json(req, RESOLVE)
        caller = principal_of(req)
        committed = self.services.app.resolve_handoff(
            organization=caller.organization,
            key=_key(handoff_id, f"No pending handoff {handoff_id}."),
            by=caller.name,
            accept=body["status"] == ACCEPTED,
        )
        self.services.projector.reflect(committed.position)
        resp.media = {"data": handoff_view(committed.value)}


def _key(handoff_id: str, missing: str) -> UUID:
    """The aggregate id inside a handoff id, accepted in its canonical (lowercase) form only."""
    key = to_uuid(HANDOFF, handoff_id)
    if key is None or public_id(key) != handoff_id:
        raise error(404, missing)
    return key


def _pending(row: PendingHandoff) -> dict[str, Any]:
    """An inbox item, in the spec's field order."""
    return {
        "handoff_id": row.handoff_id,
        "from_principal": row.from_principal,
        "to_principal": row.to_principal,
        "subject_id": row.subject_id,
        "context_id": row.context_id,
        "checkpoint_id": row.checkpoint_id,
        "message": row.message,
        "status": row.status,
        "created_at": row.created_at,
    }


def handoff_view(handoff: Handoff | HandoffRecord) -> dict[str, Any]:
    """One handoff in any status: an inbox item's fields plus `resolved_at` (also for audit)."""
    return {
        "handoff_id": handoff.handoff_id,
        "from_principal": handoff.from_principal,
        "to_principal": handoff.to_principal,
        "subject_id": handoff.subject_id,
        "context_id": handoff.context_id,
        "checkpoint_id": handoff.checkpoint_id,
        "message": handoff.message,
        "status": handoff.status,
        "created_at": iso(handoff.created_at),
        "resolved_at": None if handoff.resolved_at is None else iso(handoff.resolved_at),
    }
