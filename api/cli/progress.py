"""Progress of a long command on a terminal: counts and rate on stderr, nothing otherwise.

Progress goes to stderr only, so stdout carries the command's output alone (an export written to
stdout is the export and still verifies). When stderr is not a terminal (a pipe, a file, CI) no
bar is drawn at all, and tqdm, which takes a while to import, is not even loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Report = Callable[[int], None]
"""Called with how much is done so far (a count or a log position, never a step)."""


@contextmanager
def progress(description: str, total: int | None, unit: str) -> Iterator[Report]:
    """A bar for work of `total` units (None: a counter without an end), fed absolute counts."""
    if not sys.stderr.isatty():
        yield _quiet
        return
    from tqdm import tqdm

    with tqdm(
        total=total, desc=description, unit=f" {unit}", file=sys.stderr, dynamic_ncols=True
    ) as bar:

        def report(done: int) -> None:
            if bar.total is not None and done > bar.total:
                bar.total = done  # the log grew while we worked
            bar.update(done - bar.n)

        yield report


def _quiet(done: int) -> None:
    """Nobody is watching."""
