"""The package as tools see it: a type checker finds `titen.*` in the editable install the
Makefile makes, every package says it is typed (PEP 561), in the tree and in the wheel, and the
wheel ships the console's files.

The install maps `titen.*` onto the repository's folders through src/titen/ (symlinks) and one
.pth line, a path that mypy, pyright and jedi read as the interpreter does (docs/tooling.md).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[2]
FOLDERS = ("domain", "storage", "projections", "service", "api")
PACKAGES = (
    "domain",
    "storage",
    "projections",
    "service",
    "api",
    "api/rest",
    "api/cli",
    "api/client",
)
WHEEL_PACKAGES = (
    "titen/domain",
    "titen/storage",
    "titen/projections",
    "titen/service",
    "titen/api",
    "titen/api/rest",
    "titen/api/cli",
    "titen/client",
)
IGNORED = shutil.ignore_patterns("__pycache__", "*.egg-info")
# A newcomer's script, checked from outside the repository: a name the client does not have is
# an error only if mypy found the client's module and read its types.
USES_THE_CLIENT = """
from titen.client.rest import TitenClient
from titen.domain.lease import Lease

client: TitenClient
client.no_such_method()
Lease.Released
"""


def test_every_package_folder_is_marked_typed():
    found = {
        init.parent.relative_to(ROOT).as_posix()
        for top in FOLDERS
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found == set(PACKAGES)
    assert [p for p in PACKAGES if not (ROOT / p / "py.typed").is_file()] == []


def test_mypy_reads_the_editable_install_from_outside_the_repository(tmp_path):
    script = tmp_path / "newcomer.py"
    script.write_text(USES_THE_CLIENT)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    findings = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(findings) == 1, done.stdout
    assert '"TitenClient" has no attribute "no_such_method"' in findings[0]


def test_the_wheel_ships_py_typed_in_every_package(tmp_path):
    source = tmp_path / "source"  # a copy: building leaves build/ and egg-info behind
    for name in ("src", *FOLDERS):
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=IGNORED)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("titen-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert [p for p in WHEEL_PACKAGES if f"{p}/py.typed" not in names] == []
    assert [p for p in WHEEL_PACKAGES if f"{p}/__init__.py" not in names] == []
    console = {f"titen/api/rest/static/console.{kind}" for kind in ("html", "css", "js")}
    assert console <= names  # GET /console inlines them (api/rest/pages.py)
