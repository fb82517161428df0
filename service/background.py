"""The threads a long-running process runs beside its work, built from the services (the second
half of the composition root, service/bootstrap.py) and started and stopped as one.

A server's: the event-log follower, the key-revocation watcher, and the webhook workers, woken
by a doorbell that this process's commits ring only while a webhook is enabled and the
follower's NOTIFYs ring for every process's. A relay's: the follower, always listening, and one
worker publishing to NATS. Kept apart from `bootstrap` so that a short command never imports
the webhook sender or the NATS client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from titen.domain.webhooks import RetrySchedule
from titen.projections.follower import Follower
from titen.service.application import CommitListener
from titen.service.bootstrap import Services
from titen.service.doorbell import Doorbell
from titen.service.targets import Targets
from titen.service.webhook_sender import WebhookSender
from titen.service.workers import Workers

if TYPE_CHECKING:
    from titen.service.relay import RelaySettings


class Part(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Closing:
    """A part opened already, with nothing to start: `stop` closes it."""

    close: Callable[[], None]

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.close()


class Background:
    """Parts started in order and stopped in the reverse order: each stops before what it
    uses (webhook workers before the follower that rings them, a relay's worker before its
    connection)."""

    def __init__(self, parts: Sequence[Part]):
        self.parts = list(parts)
        self._started: list[Part] = []

    def start(self) -> None:
        """Start every part; if one fails, stop those started and raise."""
        try:
            for part in self.parts:
                part.start()
                self._started.append(part)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        while self._started:
            self._started.pop().stop()


def serving(
    services: Services,
    *,
    webhook_workers: int,
    retry_seconds: tuple[float, ...],
    allow_private: bool,
) -> Background:
    """A server's background, wired to `services`' commits (start it once they are served)."""
    presence = services.webhook_presence
    # Other processes' commits reach the doorbell through the follower's NOTIFY, needed only
    # while a webhook is enabled; a commit of this process rings it only then, too.
    follower = Follower(services.app.recorder, services.recent_events, needed=presence.enabled)
    presence.on_enabled.append(follower.wake)
    services.app.on_commit.append(follower.nudge)
    doorbell = Doorbell()
    services.app.on_commit.append(ring_while(presence.enabled, doorbell))
    follower.on_notify.append(doorbell.ring)
    presence.on_enabled.append(doorbell.ring_all)  # idle workers sleep while there is none
    sender = WebhookSender(
        services.webhooks,
        Targets(allow_private),
        RetrySchedule(retry_seconds),
        services.clock,
    )
    webhooks = Workers(
        services.delivery, sender, doorbell, webhook_workers, wanted=presence.enabled
    )
    return Background([follower, services.revocations, webhooks])


def ring_while(enabled: Callable[[], bool], doorbell: Doorbell) -> CommitListener:
    """A commit listener that rings the doorbell only while a webhook is enabled: a commit
    with nothing to deliver wakes no delivery worker."""

    def ring(position: int, organizations: frozenset[str]) -> None:
        if enabled():
            doorbell.ring()

    return ring


def relaying(services: Services, settings: RelaySettings) -> Background:
    """A relay's background: its position is the consumer named for `settings.name`, made at
    the log's beginning if new; a relay stopping finishes the publish in flight and saves its
    position before the connection to NATS closes."""
    from titen.service.relay import NatsRelay  # nats-py: loaded by a relay only
    from titen.service.relay_names import consumer_name

    name = consumer_name(settings.name)
    services.consumer_table.ensure(name, "relay", None, 0)
    relay = NatsRelay(settings, services.clock)
    doorbell = Doorbell()
    # Every commit may be the relay's to publish: the follower always listens.
    follower = Follower(services.app.recorder, services.recent_events, needed=lambda: True)
    follower.on_notify.append(doorbell.ring)
    workers = Workers(
        services.delivery, relay, doorbell, 1, claim=lambda: services.delivery.claim(name)
    )
    return Background([Closing(relay.close), follower, workers])
