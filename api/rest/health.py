"""GET /healthz (liveness) and GET /readyz (readiness); no key needed for either.
/healthz touches no database (an outage never gets healthy processes restarted). /readyz says
whether the database answers and no read model is stuck, 200 or 503; an operator's key adds
details. Positions and lags count every organization's commits: the metrics port alone has them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import falcon

from titen.api.rest.auth import by_key
from titen.api.rest.contract import INTEGER, STRING, answers, array, get, obj
from titen.service import request_budget
from titen.service.keys import Keys
from titen.service.readiness import ANSWER_SECONDS, Readiness

DETAILS = ("database", "failures")  # shown only to an operator's key
FAILURE = obj({"position": INTEGER, "event_type": STRING, "error": STRING, "failed_at": STRING})
READINESS = obj(
    {
        "status": {"type": "string", "enum": ["ready", "unavailable"]},
        "database": STRING,
        "failures": {"type": "object", "additionalProperties": FAILURE},
        "problems": array(STRING),
    },
    optional=DETAILS,
)


class Health:
    contract = get(
        "getHealth",
        "Liveness: 200 while the process answers HTTP (no database call).",
        answer=answers(obj({"status": {"type": "string", "enum": ["ok"]}})),
        public=True,
    )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"data": {"status": "ok"}}


@dataclass
class Ready:
    contract = get(
        "getReadiness",
        "Readiness: ready or unavailable and why in words; with an operator key also the "
        "database and the read models that failed on an event. The same body with 503 when "
        "the database does not answer or a read model has a recorded failure.",
        answer=answers(READINESS),
        also=(503,),
        public=True,
    )

    readiness: Readiness
    keys: Keys

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        began = time.monotonic()
        reading = self.readiness.start()  # meanwhile: the key's lookup shares its bound
        with request_budget.request(ANSWER_SECONDS):
            operator = self._operator(req)  # a key sent must be valid, as on every route
        report = self.readiness.check(reading, began)
        resp.status = falcon.HTTP_200 if report.ready else falcon.HTTP_503
        data: dict[str, Any] = {"status": "ready" if report.ready else "unavailable"}
        if operator:
            data["database"] = report.database
            data["failures"] = {
                failure.projection: {k: getattr(failure, k) for k in FAILURE["properties"]}
                for failure in report.failures
            }
        data["problems"] = report.problems() if operator else report.reasons()
        resp.media = {"data": data}

    def _operator(self, req: falcon.Request) -> bool:
        """Whether the request carries an operator's key (401 for an invalid one)."""
        header = req.get_header("Authorization")
        if header is None:
            return False
        try:
            principal, _ = by_key(self.keys, header)
        except falcon.HTTPError:
            raise
        except Exception:  # the database is down: say so, as to anyone
            return False
        return principal.is_operator
