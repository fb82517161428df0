"""A stop whose KeyboardInterrupt was lost still ends the serving loop, within a second or so.

SIGTERM's handler raises KeyboardInterrupt and ignores further signals (api/rest/connections.py);
raised while the main thread runs a finalizer, the interrupt is printed and dropped. A worker
was found serving on that way with its supervisor gone and SIGTERM ignored: only SIGKILL could
end it. The loop now looks at the remembered request at its once-a-second maintenance.
"""

from __future__ import annotations

import threading

import pytest

from titen.api.rest import connections
from titen.api.rest.connections import Server, listen
from titen.api.rest.settings import ServerSettings


def test_a_stop_whose_interrupt_was_lost_ends_the_loop(monkeypatch: pytest.MonkeyPatch):
    def app(environ: dict, start_response: object) -> list[bytes]:
        return []

    server = Server(app, ServerSettings(), 2, listen("127.0.0.1", 0))
    # waitress's `run` ends on KeyboardInterrupt (closing the server), as `serve` relies on
    thread = threading.Thread(target=server.run, daemon=True)
    try:
        thread.start()
        monkeypatch.setattr(connections, "_stop_requested", True)  # asked, its interrupt lost
        thread.join(timeout=5)
        assert not thread.is_alive(), "the loop went on serving"
    finally:
        server.close()
        thread.join(timeout=5)
