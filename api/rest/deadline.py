"""Each request's one deadline for its database waits (service/request_budget.py): every answer
comes within 10 s, else 503. A stream's frames wait on the follower, after it ends."""

from __future__ import annotations

from typing import Any

import falcon

from titen.service import request_budget


class RequestDeadline:
    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        request_budget.start()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        request_budget.end()
