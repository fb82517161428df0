"""Fixtures of the in-process API tests: the principals most tests act as, in organization acme.

Each is a fresh key on the test's own store (the `key` fixture of tests/conftest.py).
"""

from __future__ import annotations

import pytest


@pytest.fixture
def alice(key):
    return key("acme", "agent_alice")


@pytest.fixture
def bob(key):
    return key("acme", "agent_bob")


@pytest.fixture
def sender(key):
    return key("acme", "agent_sender")


@pytest.fixture
def reviewer(key):
    return key("acme", "agent_reviewer")


@pytest.fixture
def dispatcher(key):
    return key("acme", "dispatch", role="dispatcher")


@pytest.fixture
def ops(key):
    return key("acme", "ops", role="operator")
