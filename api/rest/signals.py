"""How a server is told to stop: SIGTERM as Ctrl-C, once.

SIGTERM raises KeyboardInterrupt in the main thread as Ctrl-C does, which ends waitress's loop
(or start-up, before it) and lets the server stop in order and exit 0. Once stopping, further
signals are ignored so they cannot cut the cleanup short: with several workers, Ctrl-C reaches
each worker and its parent forwards a SIGTERM as well.
"""

from __future__ import annotations

import signal
from types import FrameType


def stop_on_signals() -> None:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)


def _stop(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt
