"""`titen serve`: the API under waitress, with the projections kept fresh in the background."""

from __future__ import annotations

import logging
import threading

import waitress

from api.app import create_app
from api.services import Services

log = logging.getLogger("titen.server")
POLL_SECONDS = 0.5


def serve(services: Services, host: str, port: int, threads: int) -> None:
    stop = threading.Event()
    threading.Thread(
        target=_follow_log, args=(services, stop), name="projector", daemon=True
    ).start()
    log.info(
        "titen serving on http://%s:%d (database %s)", host, port, services.database.redacted()
    )
    try:
        waitress.serve(
            create_app(services),
            host=host,
            port=port,
            threads=threads,
            ident="titen",
            connection_limit=1000,
            channel_timeout=120,
        )
    finally:
        stop.set()


def _follow_log(services: Services, stop: threading.Event) -> None:
    """Apply events committed by other processes (or by one that crashed before applying)."""
    while not stop.wait(POLL_SECONDS):
        try:
            services.projector.catch_up()
        except Exception:
            log.exception("projection catch-up failed; retrying")
