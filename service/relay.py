"""The NATS JetStream relay: every organization's published events, in log order, to JetStream.

A sink of the shared delivery mechanism (service/delivery.py), so its position is a consumer row
in the titen database (named `relay:<name>`), claimed by one relay process at a time, retried
with backoff, its failures recorded. It publishes a batch one event after another, each waiting
for JetStream's acknowledgement, and the position advances only after the acknowledgements.
`Nats-Msg-Id` is the CloudEvent id, so what a crash between an acknowledgement and saving the
position makes it publish again is dropped by the stream's duplicate window.

nats-py is asyncio; the relay runs its connection on an event loop thread of its own, and the
delivery worker (a plain thread, as for webhooks) waits for each publish there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from titen.domain.clock import Clock, iso
from titen.domain.webhooks import RetrySchedule
from titen.projections.event_log import SOURCE_PREFIX, Published
from titen.service.consumers import Attempt, Consumer, Outcome
from titen.service.relay_names import KIND

log = logging.getLogger("titen.relay")

BATCH = 100
PUBLISH_TIMEOUT_SECONDS = 5.0
RETRY = RetrySchedule((0.5, 1, 2, 5), gives_up=False)
"""NATS unreachable: try again after these pauses, then every 5 s, for ever."""
DUPLICATE_WINDOW_SECONDS = 120
TOKEN_KEEPS = re.compile(r"[A-Za-z0-9_-]")
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PREFIX = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
KILL_AFTER_ACKS = "TITEN_RELAY_KILL_AFTER_ACKS"
"""Fault injection for tests: kill -9 this process right after that many acknowledgements,
before their position is saved."""


def subject_token(text: str) -> str:
    """One subject token: [A-Za-z0-9_-] kept, every other character as `%XX` per UTF-8 byte, so
    no organization name can add a level (`.`) or a wildcard (`*`, `>`)."""
    return "".join(
        char if TOKEN_KEEPS.fullmatch(char) else "".join(f"%{b:02X}" for b in char.encode())
        for char in text
    )


def subject(prefix: str, organization: str, kind: str) -> str:
    """`<prefix>.<organization>.<type>`: `lease.acquired` is two levels, as published."""
    return f"{prefix}.{subject_token(organization)}.{kind}"


@dataclass(frozen=True)
class RelaySettings:
    url: str
    stream: str = "TITEN"
    subject_prefix: str = "titen"
    name: str = "default"

    def check(self) -> None:
        if not NAME.fullmatch(self.stream):
            raise ValueError("--stream must be 1-64 of A-Z a-z 0-9 _ -")
        if not NAME.fullmatch(self.name):
            raise ValueError("--name must be 1-64 of A-Z a-z 0-9 _ -")
        if not PREFIX.fullmatch(self.subject_prefix):
            raise ValueError("--subject-prefix must be dot-separated tokens of A-Z a-z 0-9 _ -")


class NatsRelay:
    """The relay sink: a connection to NATS on a loop thread, the stream made if missing."""

    kind = KIND
    batch = BATCH
    schedule = RETRY

    def __init__(self, settings: RelaySettings, clock: Clock):
        self.settings = settings
        self.clock = clock
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="nats", daemon=True)
        self._thread.start()
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._acks = 0
        self._kill_after = int(os.environ.get(KILL_AFTER_ACKS, "0"))

    def open(self, consumer: Consumer) -> _Stream:
        return _Stream(self)

    def close(self) -> None:
        if self._nc is not None:
            self._run(self._nc.drain(), 10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def publish(self, event: Published) -> None:
        """Publish one event and wait for JetStream's acknowledgement (raises if none came)."""
        js = self._jetstream()
        cloud = event.event
        organization = cloud["source"].removeprefix(SOURCE_PREFIX)
        self._run(
            js.publish(
                subject(self.settings.subject_prefix, organization, cloud["type"]),
                json.dumps(event.served()).encode(),
                timeout=PUBLISH_TIMEOUT_SECONDS,
                stream=self.settings.stream,
                headers={"Nats-Msg-Id": cloud["id"]},
            ),
            PUBLISH_TIMEOUT_SECONDS + 1,
        )
        self._acks += 1
        if self._kill_after and self._acks >= self._kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    def ensure_stream(self) -> None:
        self._run(self._ensure_stream(self._jetstream()), 15)

    def _jetstream(self) -> JetStreamContext:
        """JetStream, connected (and the stream made) on first use, or again after that failed."""
        if self._js is None:
            self._js = self._run(self._connect(), 15)
        return self._js

    def _run(self, coroutine: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _connect(self) -> JetStreamContext:
        if self._nc is None:
            self._nc = await nats.connect(
                self.settings.url,
                name=f"titen-relay-{self.settings.name}",
                max_reconnect_attempts=-1,  # ride out a NATS restart, however long
                reconnect_time_wait=0.5,
                allow_reconnect=True,
                connect_timeout=5,
                error_cb=_log_error,
                disconnected_cb=_disconnected,
                reconnected_cb=_reconnected,
            )
        js = self._nc.jetstream()
        await self._ensure_stream(js)
        return js

    async def _ensure_stream(self, js: JetStreamContext) -> None:
        """Create the stream if it is missing (first start, or a NATS that lost its store)."""
        try:
            await js.stream_info(self.settings.stream)
        except NotFoundError:
            await js.add_stream(
                StreamConfig(
                    name=self.settings.stream,
                    subjects=[f"{self.settings.subject_prefix}.>"],
                    duplicate_window=DUPLICATE_WINDOW_SECONDS,
                )
            )
            log.info("created JetStream stream %s", self.settings.stream)


@dataclass
class _Stream:
    relay: NatsRelay

    def wants(self, event: Published) -> bool:
        return True

    def send(self, events: Sequence[Published], attempt: int) -> Outcome:
        for published, event in enumerate(events):
            try:
                self.relay.publish(event)
            except Exception as failed:  # NATS down, no stream, a timeout: retried
                error = f"{type(failed).__name__}: {failed}".rstrip(": ")
                log.warning("publishing %s failed: %s", event.event["id"], error)
                self._recover(failed)
                record = Attempt(
                    event.event["id"], attempt, iso(self.relay.clock.now()), None, error, 0, None
                )
                return Outcome(delivered=published, attempt=record)
        return Outcome(delivered=len(events))

    def _recover(self, failed: Exception) -> None:
        """A missing stream is made again before the retry; anything else waits for it."""
        if "no response" in str(failed).lower() or isinstance(failed, NotFoundError):
            try:
                self.relay.ensure_stream()
            except Exception:
                log.debug("stream check failed; retried with the next attempt", exc_info=True)


async def _log_error(error: Exception) -> None:
    log.warning("NATS: %s", error)


async def _disconnected() -> None:
    log.warning("NATS disconnected; reconnecting")


async def _reconnected() -> None:
    log.info("NATS reconnected")
