"""GET /healthz: 200 when the database answers, else 503; no key needed."""

from __future__ import annotations

import falcon

from titen.projections.store import ViewStore


class Health:
    public = True

    def __init__(self, store: ViewStore):
        self.store = store

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            self.store.query("SELECT 1 AS ok")
        except Exception:
            resp.status = falcon.HTTP_503
            resp.media = {"error": {"code": "UNAVAILABLE", "message": "Database unreachable."}}
            return
        resp.media = {"data": {"status": "ok"}}
