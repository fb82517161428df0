"""A reader of a real server's Server-Sent Events."""

from __future__ import annotations

import http.client
import json as jsonlib
from collections.abc import Iterator


class EventStreamReader:
    """Reads Server-Sent Events from a real server, frame by frame."""

    def __init__(
        self,
        base_url: str,
        key: str | None,
        query: str = "",
        last_event_id: str = "",
        timeout: float = 30,
    ):
        """`key` None sends no Authorization header (a ticket in `query` stands for it)."""
        host, _, port = base_url.removeprefix("http://").partition(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        if last_event_id:
            headers["last-event-id"] = last_event_id
        self.conn.request("GET", f"/v1/events/stream{query}", headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status

    def frames(self) -> Iterator[dict[str, str]]:
        """Each frame's fields (`id`, `event`, `data`, or `comment`), as they arrive."""
        frame: dict[str, str] = {}
        while line := self.response.readline():
            text = line.decode().rstrip("\n")
            if not text:
                if frame:
                    yield frame
                frame = {}
            elif text.startswith(":"):
                frame["comment"] = text[1:].strip()
            else:
                name, _, value = text.partition(": ")
                frame[name] = value

    def events(self, count: int) -> list[dict]:
        """The next `count` events (comments skipped), parsed from their data lines."""
        found = []
        for frame in self.frames():
            if "data" in frame:
                event = jsonlib.loads(frame["data"])
                assert frame["id"] == event["cursor"]
                found.append(event)
                if len(found) == count:
                    break
        return found

    def close(self) -> None:
        self.response.close()  # the response holds the socket too
        self.conn.close()
