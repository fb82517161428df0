"""An ASGI application (the MCP SDK's transport) served from the WSGI server's threads through
`a2wsgi`, its lifespan entered on a2wsgi's loop thread, which is started at the first request:
never before `fork` (a forked copy of a loop thread would not run)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # a2wsgi (with anyio) is imported when the first request starts the loop
    from a2wsgi import ASGIMiddleware
    from a2wsgi.asgi_typing import ASGIApp
    from a2wsgi.wsgi_typing import Environ
    from starlette.applications import Starlette


class AsgiBridge:
    """Calls the app `make()` builds for a WSGI environ, which the app finds in its scope (a2wsgi's
    `wsgi_environ`), and collects its whole answer (JSON, not streams)."""

    def __init__(self, make: Callable[[], Starlette]):
        self.make = make
        self._lock = threading.Lock()
        self._wsgi: ASGIMiddleware | None = None

    def call(self, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        started: list[tuple[str, list[tuple[str, str]]]] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None):
            started.append((status, headers))

        body = b"".join(self._started()(cast("Environ", environ), start_response))
        status, headers = started[-1]
        return int(status.split(" ", 1)[0]), headers, body

    def _started(self) -> ASGIMiddleware:
        with self._lock:
            if self._wsgi is None:
                from a2wsgi import ASGIMiddleware

                app = self.make()
                wsgi = ASGIMiddleware(cast("ASGIApp", app))  # starts a thread running its loop
                entered: Future[None] = Future()
                held = asyncio.run_coroutine_threadsafe(self._hold(app, entered), wsgi.loop)
                wait((entered, held), return_when=FIRST_COMPLETED)
                if not entered.done():  # entering the lifespan failed: the next request, afresh
                    wsgi.loop.call_soon_threadsafe(wsgi.loop.stop)
                    held.result()  # raises what it raised
                self._wsgi = wsgi
            return self._wsgi

    @staticmethod
    async def _hold(app: Starlette, entered: Future[None]) -> None:
        async with app.router.lifespan_context(app):
            entered.set_result(None)
            await asyncio.Event().wait()  # for the life of the process
