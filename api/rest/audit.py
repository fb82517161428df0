"""The audit routes: histories replayed from the event log, for operators, each `as_of` an instant.
An agent gets 403 whatever it asks, so probing tells it nothing; another organization's id is
404, exactly as an unknown one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import falcon

from titen.api.rest.auth import principal_of
from titen.api.rest.contract import (
    INSTANT,
    STRING,
    answers,
    array,
    fields_of,
    get,
    listing,
    nullable,
    obj,
)
from titen.api.rest.errors import error
from titen.api.rest.handoffs import HANDOFF
from titen.api.rest.paging import PAGE_QUERY, decode_cursor, encode_cursor, read_limit, single
from titen.api.schemas import body, text
from titen.api.validation import Checker, refusal, validator
from titen.domain.clock import parse_iso
from titen.domain.history import ENDINGS, LeaseTerm, Step
from titen.domain.limits import NAME_LENGTH
from titen.service.auditor import Auditor

AS_OF = {
    "type": "string",
    "format": "date-time",
    "description": "Answer as of this instant (RFC 3339, with a UTC offset).",
}
RESOURCE = {"resource_type": text(NAME_LENGTH), "resource_id": text(NAME_LENGTH), "as_of": AS_OF}
RESOURCE_QUERY = validator(body(RESOURCE, required=["resource_type", "resource_id"]))
ITEM_QUERY = validator(body({"as_of": AS_OF}, required=[]))
STEP = obj(fields_of(Step))
TERM = fields_of(
    LeaseTerm, leave=("version", "steps"), ended=nullable({"type": "string", "enum": list(ENDINGS)})
)
AS_OF_ANSWER = {"as_of": nullable(INSTANT)}
WHERE = {"resource_type": STRING, "resource_id": STRING}
OPERATOR_ONLY = ("FORBIDDEN",)


@dataclass
class AuditResource:
    contract = get(
        "auditResource",
        "The lease terms on a resource, oldest first, paged, replayed from the event log.",
        query={**RESOURCE, **PAGE_QUERY},
        required_query=("resource_type", "resource_id"),
        answer=listing("terms", obj(TERM), **WHERE, **AS_OF_ANSWER),
        errors=OPERATOR_ONLY,
    )

    auditor: Auditor

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        organization, params = _organization(req), dict(req.params)
        limit, cursor = read_limit(params), single(params, "cursor")
        after = 0 if cursor is None else decode_cursor(req, cursor, of_log=False)
        query = _query({k: v for k, v in params.items() if k not in PAGE_QUERY}, RESOURCE_QUERY)
        page = self.auditor.resource(organization, **query, after=after, limit=limit)
        resume = page.resume_after
        cursor = None if resume is None else encode_cursor(req, resume, of_log=False)
        resp.media = {"data": {**page.data, "next_cursor": cursor}}


@dataclass
class AuditLease:
    contract = get(
        "auditLease",
        "One lease's term and its events, replayed from the event log.",
        query={"as_of": AS_OF},
        answer=answers(obj({**WHERE, **AS_OF_ANSWER, **TERM, "events": array(STEP)})),
        errors=OPERATOR_ONLY,
    )

    auditor: Auditor

    def on_get(self, req: falcon.Request, resp: falcon.Response, lease_id: str) -> None:
        resp.media = {"data": self.auditor.lease(_organization(req), lease_id, _as_of(req))}


@dataclass
class AuditHandoff:
    contract = get(
        "auditHandoff",
        "One handoff's state and its events, replayed from the event log.",
        query={"as_of": AS_OF},
        answer=answers(obj({**AS_OF_ANSWER, **HANDOFF["properties"], "events": array(STEP)})),
        errors=OPERATOR_ONLY,
    )

    auditor: Auditor

    def on_get(self, req: falcon.Request, resp: falcon.Response, handoff_id: str) -> None:
        resp.media = {"data": self.auditor.handoff(_organization(req), handoff_id, _as_of(req))}


def _organization(req: falcon.Request) -> str:
    """The caller's organization; 403 unless it is an operator."""
    caller = principal_of(req)
    if not caller.is_operator:
        raise error(403)
    return caller.organization


def _as_of(req: falcon.Request) -> datetime | None:
    """The `as_of` asked of one lease or handoff (None when not given)."""
    return _query(req.params, ITEM_QUERY)["as_of"]


def _query(params: Mapping[str, Any], checker: Checker) -> dict[str, Any]:
    """The query string checked like a body (known names, each once, within the schema), with
    its `as_of` read (None when not given)."""
    for name in params:
        single(params, name)
    refused = refusal(params, checker)
    if refused is not None:
        raise error(400, refused)
    try:
        return {**params, "as_of": parse_iso(params["as_of"]) if "as_of" in params else None}
    except ValueError:
        raise error(
            400, "as_of must be an instant with a UTC offset, like 2026-07-30T10:52:00.000Z."
        ) from None
