"""A real webhook receiver on loopback for tests and benches: records every request it gets
and answers each with the status its `answer` function chooses."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    """time.time() when the request had been read."""


class Receiver:
    def __init__(
        self,
        answer: Callable[[Received], int] | None = None,
        delay: float = 0,
        reply: bytes | None = None,
    ):
        """`reply` is the body of every answer (default: `answered <status>`)."""
        self.answer = answer or (lambda _request: 200)
        self.delay = delay
        self.reply = reply
        self.received: list[Received] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                request = Received(
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length),
                    time.time(),
                )
                with receiver._changed:
                    receiver.received.append(request)
                    receiver._changed.notify_all()
                if receiver.delay:
                    time.sleep(receiver.delay)
                status = receiver.answer(request)
                body = receiver.reply or f"answered {status}".encode()
                # The sender may hang up first (its timeout ran out while this one waited).
                with contextlib.suppress(ConnectionError):
                    self.send_response(status)
                    if 300 <= status < 400:
                        self.send_header("location", "http://127.0.0.1:9/elsewhere")
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, count: int, timeout: float = 20) -> list[Received]:
        """The requests once at least `count` have arrived; fails if they never do."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.received) >= count, timeout):
                raise AssertionError(f"received {len(self.received)} of {count} in {timeout} s")
            return list(self.received)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
