"""Waiting on a condition, the one way the suite waits for something to happen."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(condition: Callable[[], object], what: str, timeout: float = 10) -> None:
    """Poll `condition` until it holds; fail naming `what` if it never does."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)
