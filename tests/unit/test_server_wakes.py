"""A request's thread skips waitress's wake-up of its server's loop when the connection it served
will wake that loop anyway (`Server.pull_trigger`, `Channel.loop_will_hear`). Only that server's:
a wake-up asked of another server from the same thread always goes out, or that other loop would
sleep through work it was woken for."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from waitress.server import BaseWSGIServer

from titen.api.rest import connections
from titen.api.rest.connections import Server


@pytest.fixture
def pulled(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The servers whose loops were woken through waitress's trigger."""
    woken: list[object] = []
    monkeypatch.setattr(BaseWSGIServer, "pull_trigger", lambda server: woken.append(server))
    return woken


def serving(monkeypatch: pytest.MonkeyPatch, server: object, will_hear: bool) -> None:
    """This thread serves a connection of `server` whose loop will (or will not) hear from it."""
    channel = SimpleNamespace(server=server, loop_will_hear=lambda: will_hear)
    monkeypatch.setattr(connections._serving, "channel", channel, raising=False)


def test_a_wake_up_the_served_connection_makes_needless_is_skipped(monkeypatch, pulled):
    one = object.__new__(Server)
    serving(monkeypatch, one, will_hear=True)
    Server.pull_trigger(one)
    assert pulled == []


def test_a_wake_up_of_another_server_is_never_skipped(monkeypatch, pulled):
    one, other = object.__new__(Server), object.__new__(Server)
    serving(monkeypatch, one, will_hear=True)
    Server.pull_trigger(other)
    assert pulled == [other]


def test_a_wake_up_the_loop_will_not_hear_of_otherwise_goes_out(monkeypatch, pulled):
    one = object.__new__(Server)
    serving(monkeypatch, one, will_hear=False)
    Server.pull_trigger(one)
    assert pulled == [one]
