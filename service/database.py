"""The database as the edges name it: the default URL and pool size, reading a URL, and the
errors that refuse one (re-exported from storage/database.py, which the edges do not import).

A light module: every command's `--database` default is read from it, so `titen --help` loads
no database driver.
"""

from __future__ import annotations

from titen.storage.database import (
    DEFAULT_POOL_SIZE,
    DEFAULT_URL,
    BadDatabaseURL,
    CannotOpen,
    Database,
    parse,
)

__all__ = ["DEFAULT_POOL_SIZE", "DEFAULT_URL", "BadDatabaseURL", "CannotOpen", "Database", "parse"]
