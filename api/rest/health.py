"""GET /healthz: 200 when the database answers, else 503; no key needed."""

from __future__ import annotations

import falcon

from titen.service.bootstrap import Services


class Health:
    public = True

    def __init__(self, services: Services):
        self.services = services

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            self.services.store.query("SELECT 1 AS ok")
        except Exception:
            resp.status = falcon.HTTP_503
            resp.media = {"error": {"code": "UNAVAILABLE", "message": "Database unreachable."}}
            return
        resp.media = {"data": {"status": "ok"}}
