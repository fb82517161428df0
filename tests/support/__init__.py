"""Helpers shared by every layer of the suite, one concern a module; every name is here too,
so tests import them as `from tests.support import X`."""

from tests.support.browser import chromium, chromium_path
from tests.support.client import Http, LongPoll, bearer
from tests.support.clock import FakeClock
from tests.support.commands import TITEN, acquire, besides_database, create_key, titen
from tests.support.metrics import sample, scrape, subscriptions_held
from tests.support.ports import LISTENING_PORTS, free_port
from tests.support.raw_http import read_http_request
from tests.support.server import STARTUP_BOUND, Server, alive, child_pids
from tests.support.stores import (
    FIXTURES,
    POSTGRES_URL,
    RELEASE_SCHEMAS,
    postgres_reason,
    postgres_schema,
    previous_release_manifest,
    previous_release_store,
)
from tests.support.streams import EventStreamReader
from tests.support.waiting import eventually

__all__ = [
    "FIXTURES",
    "LISTENING_PORTS",
    "POSTGRES_URL",
    "RELEASE_SCHEMAS",
    "STARTUP_BOUND",
    "TITEN",
    "EventStreamReader",
    "FakeClock",
    "Http",
    "LongPoll",
    "Server",
    "acquire",
    "alive",
    "bearer",
    "besides_database",
    "child_pids",
    "chromium",
    "chromium_path",
    "create_key",
    "eventually",
    "free_port",
    "postgres_reason",
    "postgres_schema",
    "previous_release_manifest",
    "previous_release_store",
    "read_http_request",
    "sample",
    "scrape",
    "subscriptions_held",
    "titen",
]
