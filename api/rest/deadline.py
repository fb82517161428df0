"""Each request's one deadline for its database work (storage/request_budget.py).

Every wait a request makes on the database (a connection, a lock, an answer, a standby,
settling a commit whose answer was lost) ends by it, so every answer comes within 10 s; past
it the answer is 503 with Retry-After. A stream's frames are sent after this ends, and wait on
the follower, not on the database.
"""

from __future__ import annotations

from typing import Any

import falcon

from titen.service import request_budget


class RequestDeadline:
    """Falcon middleware: the request's deadline starts with it and ends with its answer."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        request_budget.start()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        request_budget.end()
