"""How a server is told to stop: SIGTERM as Ctrl-C, once.

SIGTERM raises KeyboardInterrupt in the main thread as Ctrl-C does, which ends waitress's loop
(or start-up) and lets the server stop in order and exit 0; further signals are then ignored so
they cannot cut the cleanup short. The interrupt can be lost (raised while the main thread runs
a finalizer, it is printed and dropped), so the request is also remembered (`stop_requested`)
and the serving loop, which looks at least once a second, raises it again.
"""

from __future__ import annotations

import signal
from types import FrameType

_requested = False


def stop_on_signals() -> None:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)


def stop_requested() -> bool:
    """Whether SIGTERM or Ctrl-C has asked this process to stop."""
    return _requested


def _stop(signum: int, frame: FrameType | None) -> None:
    global _requested
    _requested = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt
