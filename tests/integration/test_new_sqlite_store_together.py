"""Several processes opening one new SQLite store at once all open it.

Putting a new file in WAL mode needs the file to itself, and SQLite refuses the switch at once,
without waiting, while another connection uses the file: four bootstraps of one new store
failed about one time in seven ("database is locked"), a flaky CI run of
tests/api/test_leaks.py. The switch is now made once, under the store's start-up lock, and
retried while refused (storage/database.py). Sixty rounds failed the old code in each of five runs.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from titen.service.bootstrap import Services, bootstrap

ROUNDS = 60
TOGETHER = 4


def test_bootstraps_of_one_new_store_at_once_all_open_it_in_wal_mode(tmp_path: Path):
    for round_ in range(ROUNDS):
        path = tmp_path / f"round{round_}.db"
        opened, failed = open_together(f"sqlite:///{path}")
        for services in opened:
            services.close()
        assert failed == [], f"round {round_}"
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def open_together(url: str) -> tuple[list[Services], list[Exception]]:
    """TOGETHER bootstraps of `url` at once: the stores opened, and the errors raised."""
    opened: list[Services] = []
    failed: list[Exception] = []

    def start() -> None:
        try:
            opened.append(bootstrap(url, pool_size=2))
        except Exception as error:  # reported by the caller
            failed.append(error)

    threads = [threading.Thread(target=start) for _ in range(TOGETHER)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return opened, failed
