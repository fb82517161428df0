"""GET /v1/me: who the key is and what its role lets it do (as `Principal` decides), so a page
shows only what works without restating the role list."""

from __future__ import annotations

import falcon

from titen.api.rest.auth import principal_of
from titen.api.rest.contract import BOOLEAN, STRING, Operation, answers, obj, operations

IDENTITY = obj(
    {
        "organization": STRING,
        "principal": STRING,
        "role": STRING,
        "reads_organization": BOOLEAN,
        "releases_any_lease": BOOLEAN,
        "reads_audit": BOOLEAN,
    }
)


class Me:
    contract = operations(
        get=Operation(
            "getIdentity",
            "The key's organization, principal and role, and what the role may do.",
            answer=answers(IDENTITY),
            description="`reads_organization`: lists the organization's leases and pending "
            "handoffs (else only the caller's own); `releases_any_lease`: may release another "
            "principal's lease; `reads_audit`: may read the audit routes.",
        )
    )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        caller = principal_of(req)
        resp.set_header("Cache-Control", "no-store")
        resp.media = {
            "data": {
                "organization": caller.organization,
                "principal": caller.name,
                "role": caller.role,
                "reads_organization": caller.reads_organization,
                "releases_any_lease": caller.is_operator,
                "reads_audit": caller.is_operator,
            }
        }
