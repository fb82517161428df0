"""A small JSON client over real HTTP, and a long-poll waiting in the background."""

from __future__ import annotations

import http.client
import json as jsonlib
import threading
import time


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


class Http:
    """A small JSON client over real HTTP, one connection per request (safe across threads)."""

    def __init__(self, base_url: str, key: str | None = None):
        self.host, _, port = base_url.removeprefix("http://").partition(":")
        self.port = int(port)
        self.key = key

    def request(
        self,
        method: str,
        path: str,
        json: object = None,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict | None]:
        headers = dict(headers or {})
        token = key or self.key
        if token:
            headers["authorization"] = f"Bearer {token}"
        body = None
        if json is not None:
            body = jsonlib.dumps(json)
            headers["content-type"] = "application/json"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        return response.status, jsonlib.loads(data) if data else None


class LongPoll(threading.Thread):
    """A long-poll (GET `path`, e.g. /v1/events?...&wait=30) waiting in the background; when it
    answered, and with what."""

    def __init__(self, base_url: str, path: str, key: str | None = None):
        super().__init__(daemon=True)
        self.http = Http(base_url, key)
        self.path = path
        self.answered_at = 0.0
        self.answer: tuple[int, dict | None] = (0, None)

    def run(self) -> None:
        self.answer = self.http.request("GET", self.path)
        self.answered_at = time.monotonic()
