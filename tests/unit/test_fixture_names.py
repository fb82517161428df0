"""The suite shares its fixtures instead of copying them: no fixture name is defined in more than
two test modules (conftest files counted), so a name means one thing wherever a test uses it."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parents[1]


def is_fixture(decorator: ast.expr) -> bool:
    called = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(called) in ("pytest.fixture", "fixture")


def fixture_name(function: ast.FunctionDef | ast.AsyncFunctionDef, decorator: ast.expr) -> str:
    """The name a fixture is requested by: its function's, or the one `name=` gives it."""
    for keyword in decorator.keywords if isinstance(decorator, ast.Call) else ():
        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
            return str(keyword.value.value)
    return function.name


def modules_defining() -> dict[str, set[str]]:
    """Each fixture name and the test modules that define it."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in TESTS.rglob("*.py"):
        if "fixtures" in path.relative_to(TESTS).parts:
            continue  # stores earlier releases wrote, and their generators
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for decorator in filter(is_fixture, node.decorator_list):
                    found[fixture_name(node, decorator)].add(str(path.relative_to(TESTS)))
    return found


def test_no_fixture_name_is_defined_in_more_than_two_modules():
    crowded = {name: sorted(paths) for name, paths in modules_defining().items() if len(paths) > 2}
    assert not crowded, f"share these from a conftest.py instead: {crowded}"


def test_the_count_sees_fixtures_and_their_modules():
    found = modules_defining()
    assert found["database"] == {"conftest.py"}
    assert found["server"] >= {"e2e/conftest.py"}
