"""Headless Chromium, as the browser tests run it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def chromium_path() -> str:
    """The browser the browser tests drive; skipped without it, except in CI."""
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def chromium(profile: str | Path, *arguments: str) -> list[str]:
    """Headless Chromium's command line, as the browser tests run it, with a profile of its own."""
    return [
        chromium_path(),
        "--headless",
        "--no-sandbox",  # it runs as root here
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *arguments,
    ]
