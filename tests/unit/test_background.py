"""The background of a server or relay starts its parts in order and stops them in reverse,
also when one of them fails to start."""

from __future__ import annotations

import pytest

from titen.service.background import Background, Closing


class Recorded:
    def __init__(self, name: str, log: list[str], fails: bool = False):
        self.name = name
        self.log = log
        self.fails = fails

    def start(self) -> None:
        if self.fails:
            raise RuntimeError(f"{self.name} cannot start")
        self.log.append(f"start {self.name}")

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")


def test_parts_stop_in_the_reverse_order_of_their_start():
    log: list[str] = []
    background = Background([Closing(lambda: log.append("close a")), Recorded("b", log)])
    background.start()
    background.stop()
    background.stop()  # stopped already: nothing more
    assert log == ["start b", "stop b", "close a"]


def test_a_part_that_fails_to_start_stops_those_started_before_it():
    log: list[str] = []
    parts = [Recorded("a", log), Recorded("b", log), Recorded("c", log, fails=True)]
    background = Background([*parts, Recorded("d", log)])
    with pytest.raises(RuntimeError, match="c cannot start"):
        background.start()
    assert log == ["start a", "start b", "stop b", "stop a"]
