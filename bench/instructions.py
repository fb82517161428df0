"""An in-process acquire's CPU instructions on SQLite, counted by valgrind's callgrind.

    .venv/bin/python bench/instructions.py [--acquires 100,600] [--before CHECKOUT] [--rounds 1]

An instruction count does not move with the machine's load. Two children run under callgrind:
a fresh store, 200 acquires to warm up, then N (each count of `--acquires`) through the Falcon
app as waitress calls it, with `titen serve --workers 1`'s organization budget; the difference
of their totals over the difference of the counts is one more acquire, split by shared object.
`--before` counts a checkout's code too (a folder: `git worktree add --detach FOLDER REV`; each
child checks it imported that checkout's `src/titen`, a namespace package). Not counted: system
calls' and page reads' real cost, a served acquire's HTTP and the other worker processes.
"""

from __future__ import annotations

import argparse
import inspect
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

WARM_UP = 200
OBJECTS = {"libpython": "Python", "libsqlite3": "SQLite", "libc.so": "C library"}
"""Shared objects reported apart (how each one's file name starts, and what the report calls
it); every other object is summed as "other"."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--acquires", default="100,600", help="two counts, comma-separated")
    parser.add_argument("--before", help="another checkout, counted the same way first")
    parser.add_argument("--rounds", type=int, default=1, help="times each build is counted")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    counts = sorted({int(n) for n in args.acquires.split(",")})
    if len(counts) != 2:
        parser.error("--acquires takes two different counts, comma-separated")
    low, high = counts
    builds = [("before", source_of(Path(args.before)))] if args.before else []
    builds.append(("this checkout", source_of(Path(__file__).resolve().parents[1])))
    for _ in range(args.rounds):
        for name, source in builds:
            report(name, per_acquire(source, low, high))


def source_of(checkout: Path) -> Path:
    """The folder a checkout's `titen` imports from (its `src/`); a path that is not a
    checkout (a revision's name, say) is refused rather than counting this checkout's code."""
    source = checkout.resolve() / "src"
    if not (source / "titen" / "service").is_dir():
        raise SystemExit(f"{checkout} is not a checkout of titen (no src/titen/service)")
    return source


def child(acquires: int) -> None:
    """Acquire `acquires` new resources after a warm-up, in this process (under valgrind)."""
    from profile_acquire import acquire  # beside this script, first on the import path

    import titen.service
    from titen.api.rest.app import create_app
    from titen.service.bootstrap import bootstrap

    given = Path(os.environ["PYTHONPATH"], "titen", "service")
    if Path(titen.service.__file__).parent != given:
        raise SystemExit(f"imported {titen.service.__file__}, not the code in {given}")
    with tempfile.TemporaryDirectory() as folder:
        services = bootstrap(f"sqlite:///{folder}/count.db", pool_size=4)
        try:
            key = services.keys.create("bench", "agent_bench", "agent")
            app = create_app(services, **served(create_app))
            acquire(app, key, WARM_UP, "warm")
            acquire(app, key, acquires, "counted")
        finally:
            services.close()


def served(create_app: Callable[..., Any]) -> dict[str, Any]:
    """What `titen serve --workers 1` adds to `create_app`'s services: the organization's
    budget at its default rate, where the checkout has one."""
    if "budget" not in inspect.signature(create_app).parameters:
        return {}
    from titen.api.rest.budget import org_budget
    from titen.api.rest.settings import DEFAULTS

    return {"budget": org_budget(DEFAULTS)}


def per_acquire(source: Path, low: int, high: int) -> Counter[str]:
    """Instructions of one more acquire of `source`'s code, by shared object (and "total")."""
    with tempfile.TemporaryDirectory() as folder:
        environment = {**os.environ, "PYTHONPATH": str(source)}
        outputs = {n: Path(folder) / f"callgrind.{n}" for n in (low, high)}
        children = [
            subprocess.Popen(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={out}",
                    sys.executable,
                    __file__,
                    "--child",
                    str(n),
                ],
                env=environment,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for n, out in outputs.items()
        ]
        for process in children:
            if process.wait() != 0:
                raise SystemExit(f"valgrind failed ({process.args})")
        counted = {n: by_object(out) for n, out in outputs.items()}
    return Counter(
        {part: (counted[high][part] - counted[low][part]) // (high - low) for part in counted[high]}
    )


def by_object(output: Path) -> Counter[str]:
    """A callgrind output's instructions, by part (`part_of` its shared object) and in total.

    Read from the file itself: each cost line counts for the object of the last `ob=` line,
    inlined code included (callgrind_annotate leaves inlined code without its object), and the
    line after `calls=` is a call's inclusive cost, counted where the callee is."""
    names: dict[str, str] = {}
    counts: Counter[str] = Counter()
    part, call_cost = "other", False
    for line in output.read_text().splitlines():
        if line.startswith("ob="):
            part = part_of(_named(line[3:], names))
        elif line.startswith("cob="):
            _named(line[4:], names)  # a callee's object, named here the first time
        elif line.startswith("calls="):
            call_cost = True
        elif line[:1].isdigit() or line[:1] in ("+", "-", "*"):
            fields = line.split()
            if not call_cost and len(fields) > 1:
                counts[part] += int(fields[1])
            call_cost = False
        elif line.startswith(("summary:", "totals:")):
            counts["total"] = int(line.split()[1])
    return counts


def _named(field: str, names: dict[str, str]) -> str:
    """A compressed name (`(7) /lib/x.so` the first time, `(7)` after) as its full name."""
    if not field.startswith("("):
        return field
    number, _, name = field.partition(")")
    if name.strip():
        names[number] = name.strip()
    return names.get(number, "")


def part_of(shared_object: str) -> str:
    """OBJECTS' name for a shared object: the interpreter (libpython, or a python binary that
    links it in), SQLite, the C library, or "other" (extension modules included)."""
    base = Path(shared_object).name
    if base.startswith(("libpython", "python")):
        return OBJECTS["libpython"]
    return next((name for key, name in OBJECTS.items() if base.startswith(key)), "other")


def report(build: str, counts: Counter[str]) -> None:
    total = counts["total"]
    parts = "  ".join(
        f"{name} {counts[name]:,} ({counts[name] / total:.0%})"
        for name in (*OBJECTS.values(), "other")
    )
    print(f"{build}: {total:,} instructions per acquire  [{parts}]", flush=True)


if __name__ == "__main__":
    main()
