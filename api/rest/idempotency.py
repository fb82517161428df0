"""The Idempotency-Key header: a retried POST gets the first answer again instead of running twice.

The first 2xx answer is stored in the command's own transaction (titen.service.answers), failures
are not. A repeat arriving while the first runs waits for it in this process (up to WAIT_SECONDS,
else 409), or in another meets the stored answer's unique row (docs/idempotency.md)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import falcon

from titen.api.rest.auth import principal_of
from titen.api.rest.body import read_json
from titen.api.rest.contract import IDEMPOTENCY_KEY_IN_USE, IDEMPOTENCY_KEY_REUSED
from titen.api.rest.errors import error
from titen.api.validation import Checker
from titen.domain.errors import DomainError
from titen.service import request_budget
from titen.service.answers import AlreadyAnswered, Answer, Kept, Scope, StoredAnswers, fingerprint

T = TypeVar("T")
HEADER = "Idempotency-Key"
KEY = re.compile(r"[!-~]{1,255}")
WAIT_SECONDS = 10.0
BAD_KEY = f"{HEADER} must be 1 to 255 characters from ! to ~ (printable ASCII, no spaces)."
IN_USE = f"A request with this {HEADER} is still running; retry in a moment."
REUSED = f"This {HEADER} was used with a different request body; use a new key for a new request."


@dataclass
class _Flight:
    fingerprint: str
    done: threading.Event = field(default_factory=threading.Event)


class Idempotency:
    def __init__(self, answers: StoredAnswers):
        self.answers = answers
        self._flights: dict[Scope, _Flight] = {}
        self._lock = threading.Lock()

    def post(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        checker: Checker | None,
        status: int,
        command: Callable[..., T],
        render: Callable[[T], dict[str, Any]],
        kept: Callable[[T], dict[str, Any]] | None = None,
    ) -> None:
        """Answer `status` and `render(command(caller, keep=keep, **fields))`, the body checked
        by `checker` (None: it has none) and its fields each the schema names (None if absent),
        or replay the stored answer; the service stores `keep(result)` with its events. `kept`
        renders what is stored, when that must be less than the first answer (a secret is
        answered once)."""
        body: dict[str, Any] | None = None
        fields: dict[str, Any] = {}
        if checker is not None:
            body = read_json(req, checker)
            fields = {**dict.fromkeys(checker.schema["properties"]), **body}
        caller, key = principal_of(req), req.get_header(HEADER)
        if key is None:
            resp.status, resp.media = status, render(command(caller, keep=None, **fields))
            return
        if not KEY.fullmatch(key):
            raise error(400, BAD_KEY)
        scope = Scope(caller.organization, caller.name, req.method, req.path, key)
        print_ = fingerprint(body)
        flight = self._take_off(scope, print_)
        try:
            stored = self.answers.find(scope)
            if stored is not None:
                _replay(resp, stored, print_)
                return

            def keep(value: T) -> Kept:
                return Kept(scope, Answer(print_, status, json.dumps((kept or render)(value))))

            try:
                value = command(caller, keep=keep, **fields)
            except (AlreadyAnswered, DomainError) as failure:
                # Another process may have run it meanwhile: its stored answer is the answer.
                stored = self.answers.find(scope)
                if stored is None and isinstance(failure, AlreadyAnswered):
                    raise error(409, IN_USE, code=IDEMPOTENCY_KEY_IN_USE) from None
                if stored is None:
                    raise
                _replay(resp, stored, print_)
                return
            _answer_text(resp, status, json.dumps(render(value)))  # as a replay will send it
        finally:
            with self._lock:
                del self._flights[scope]
            flight.done.set()

    def _take_off(self, scope: Scope, print_: str) -> _Flight:
        """Run alone for this scope in this process: wait for an identical request, refuse
        a different one."""
        while True:
            with self._lock:
                running = self._flights.get(scope)
                if running is None:
                    mine = self._flights[scope] = _Flight(print_)
                    return mine
            if running.fingerprint != print_:
                raise error(422, REUSED, code=IDEMPOTENCY_KEY_REUSED)
            if not running.done.wait(request_budget.left(WAIT_SECONDS)):
                raise error(409, IN_USE, code=IDEMPOTENCY_KEY_IN_USE)


def _answer_text(resp: falcon.Response, status: int, text: str) -> None:
    resp.status = status
    resp.content_type = falcon.MEDIA_JSON
    resp.text = text


def _replay(resp: falcon.Response, stored: Answer, print_: str) -> None:
    if stored.fingerprint != print_:
        raise error(422, REUSED, code=IDEMPOTENCY_KEY_REUSED)
    _answer_text(resp, stored.status, stored.body)
    resp.set_header("Idempotent-Replayed", "true")
