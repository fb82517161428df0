"""Waiting on a condition, the one way the suite waits for something to happen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    condition: Callable[[], T], what: str, timeout: float = 10, every: float = 0.01
) -> T:
    """Poll `condition` (every `every` seconds) until it holds, and return what it returned;
    fail naming `what` if it never does."""
    deadline = time.monotonic() + timeout
    while not (held := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(every)
    return held
