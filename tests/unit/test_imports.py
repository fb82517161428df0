"""Every module of the package imports, and no module imports itself through others.

A cycle is counted through every import statement, wherever it stands: at the top, inside a
function (deferred, but still a dependency: the cycle through `api/rest` this replaced ran
through one), or under `if TYPE_CHECKING:` (a cycle to a type checker and a reader all the same).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGES = (
    "titen.domain",
    "titen.storage",
    "titen.projections",
    "titen.service",
    "titen.api",
    "titen.api.rest",
    "titen.api.cli",
    "titen.client",
)


def modules() -> dict[str, Path]:
    """Every module of the package, by name, with its file."""
    found = {}
    for name in PACKAGES:
        package = importlib.import_module(name)
        assert package.__file__ is not None
        found[name] = Path(package.__file__)
        for module in pkgutil.iter_modules(package.__path__, name + "."):
            if not module.ispkg:
                spec = importlib.util.find_spec(module.name)
                assert spec is not None and spec.origin is not None, module.name
                found[module.name] = Path(spec.origin)
    return found


def imported(name: str, path: Path) -> set[str]:
    """The names each import statement of a module may refer to, as modules: `from a.b import
    c` gives both a.b and a.b.c (c may be a module or a name in a.b)."""
    names: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def cycle(found: dict[str, Path]) -> list[str] | None:
    """A cycle among the modules' imports (each module once, then the first again), or None."""
    graph = {
        name: {other for other in imported(name, path) if other in found and other != name}
        for name, path in found.items()
    }
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as found_cycle:
        return list(reversed(found_cycle.args[1]))  # each imports the next
    return None


def test_every_module_imports():
    found = modules()
    assert len(found) > 90  # every module was listed, not none
    for name in found:
        importlib.import_module(name)


def test_no_module_imports_itself_through_others():
    assert cycle(modules()) is None


def test_a_cycle_through_a_deferred_or_type_checking_import_is_found(tmp_path):
    sources = {
        "a": "def later():\n    from b import thing\n",
        "b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import c\n",
        "c": "import a\n",
    }
    for name, source in sources.items():
        (tmp_path / f"{name}.py").write_text(source)
    found = {name: tmp_path / f"{name}.py" for name in sources}
    assert cycle(found) in (["a", "b", "c", "a"], ["b", "c", "a", "b"], ["c", "a", "b", "c"])
    del sources["c"]
    assert cycle({name: found[name] for name in sources}) is None


def test_the_lint_refuses_an_edge_that_imports_storage_or_projections():
    """api/ruff.toml: the edges call the service layer only, at the top or inside a function;
    the service layer itself may import both."""
    source = (
        "from titen.storage.database import parse\n\n\n"
        "def later():\n"
        "    from titen.projections.follower import Follower\n\n"
        "    return parse, Follower\n"
    )

    def refused(path: str) -> list[str]:
        ruff = Path(sys.executable).with_name("ruff")
        done = subprocess.run(
            [str(ruff), "check", "--output-format", "concise", "--stdin-filename", path, "-"],
            input=source,
            capture_output=True,
            text=True,
            cwd=Path(__file__).parents[2],
            timeout=60,
        )
        return [line for line in done.stdout.splitlines() if "TID251" in line]

    assert len(refused("api/rest/probe.py")) == 2
    assert len(refused("api/cli/probe.py")) == 2
    assert refused("service/probe.py") == []
