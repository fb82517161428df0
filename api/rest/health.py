"""GET /healthz (liveness) and GET /readyz (readiness); no key needed for either.

A load balancer or an orchestrator asks both: /healthz only says the process answers HTTP (it
touches no database, so a database outage never gets healthy processes restarted), /readyz
says whether this server can do its work now: the database answers and no read model is stuck.
/readyz answers the same body either way, 200 or 503, so whoever reads a 503 sees why.
"""

from __future__ import annotations

from dataclasses import asdict

import falcon

from titen.service.readiness import Readiness


class Health:
    public = True

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"data": {"status": "ok"}}


class Ready:
    public = True

    def __init__(self, readiness: Readiness):
        self.readiness = readiness

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        report = self.readiness.check()
        resp.status = falcon.HTTP_200 if report.ready else falcon.HTTP_503
        resp.media = {
            "data": {
                "status": "ready" if report.ready else "unavailable",
                "database": report.database,
                "log_position": report.log_position,
                "projections": {name: asdict(state) for name, state in report.projections.items()},
                "problems": report.problems(),
            }
        }
