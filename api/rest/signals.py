"""How a server is told to stop: SIGTERM as Ctrl-C, once (later signals are ignored: they would
cut the cleanup short). KeyboardInterrupt raised in a finalizer is printed and dropped, so the
request is also remembered (`stop_requested`) for the serving loop to raise again."""

from __future__ import annotations

import signal
from types import FrameType

_requested = False


def stop_on_signals() -> None:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)


def stop_requested() -> bool:
    return _requested


def _stop(signum: int, frame: FrameType | None) -> None:
    global _requested
    _requested = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt
