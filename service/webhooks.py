"""Webhook subscriptions as callers manage them: create, list, read, delete, rotate, enable,
and each one's delivery attempts.

A subscription is configuration of the edge, like an API key, not a fact of the domain: it holds
a signing secret, which must be replaceable and must never be written into the append-only log
(or an audit export). So it lives in a plain table beside the read models, and its delivery
state is a consumer of the shared delivery mechanism (service/delivery.py), created and removed in
the same transaction as the subscription.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from titen.domain.clock import Clock, iso
from titen.domain.errors import InvalidField, NotFound
from titen.domain.events import PUBLISHED
from titen.domain.ids import new_id
from titen.domain.webhooks import (
    MAX_WEBHOOKS_PER_PRINCIPAL,
    SECRET_PREFIX,
    WEBHOOK,
    Target,
    parse_target,
    validate_types,
)
from titen.projections.store import Row, ViewStore, Writer
from titen.service.answers import StoredAnswers
from titen.service.application import Keep, Titen
from titen.service.consumer_table import ConsumerTable
from titen.service.consumers import ACTIVE, Attempt, Consumer
from titen.service.keys import Keys, Principal
from titen.service.roles import WHOLE_LOG
from titen.service.targets import TargetRefused, Targets
from titen.service.webhook_presence import KIND, WebhookPresence


@dataclass(frozen=True)
class Webhook:
    webhook_id: str
    seq: int
    organization: str
    owner: str
    target: Target
    types: tuple[str, ...]
    to_principal: str | None
    created_at: str
    secret: str
    status: str

    def public(self) -> dict[str, Any]:
        """As the routes show it (never with the secret)."""
        return {
            "webhook_id": self.webhook_id,
            "url": self.target.url,
            "types": list(self.types),
            "to_principal": self.to_principal,
            "status": self.status,
            "created_at": self.created_at,
        }


class Webhooks:
    def __init__(
        self,
        store: ViewStore,
        consumers: ConsumerTable,
        keys: Keys,
        app: Titen,
        clock: Clock,
        answers: StoredAnswers,
        presence: WebhookPresence,
    ):
        self.answers = answers
        self.presence = presence
        self.store = store
        self.consumers = consumers
        self.keys = keys
        self.app = app
        self.clock = clock
        with store.writing() as writer:
            for statement in SCHEMA:
                writer.execute(statement)
            writer.execute(
                "INSERT INTO {webhook_sequence} VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
            )

    def create(
        self,
        caller: Principal,
        *,
        url: str,
        types: Sequence[str] | None,
        to_principal: str | None,
        targets: Targets,
        keep: Keep = None,
    ) -> tuple[Webhook, str]:
        """A new subscription of the caller's, delivering what commits from now on; its secret
        (returned this once). `keep((webhook, secret))` is stored in the same transaction (an
        idempotent request's answer)."""
        target = parse_target(url)
        chosen = PUBLISHED if types is None else validate_types(types, PUBLISHED)
        if to_principal is not None and not self.keys.is_principal(
            caller.organization, to_principal
        ):
            raise InvalidField(
                "to_principal", "to_principal is not a principal of this organization."
            )
        try:
            targets.addresses(target)
        except TargetRefused as refused:
            raise InvalidField("url", str(refused)) from None
        webhook_id, secret = new_id(WEBHOOK), _new_secret()
        created_at = iso(self.clock.now())
        # Everything committed so far is before the subscription; it starts after it.
        start = self.app.recorder.max_notification_id() or 0
        with self.store.writing() as writer:
            # Taking the next number locks the counter row: creations queue here, so the limit
            # below is counted with no other creation in flight.
            seq = writer.fetchall(
                "UPDATE {webhook_sequence} SET value = value + 1 WHERE id = 1 RETURNING value"
            )[0]["value"]
            held = writer.fetchall(
                "SELECT COUNT(*) AS held FROM {webhooks} WHERE organization = %s AND owner = %s",
                [caller.organization, caller.name],
            )[0]["held"]
            if held >= MAX_WEBHOOKS_PER_PRINCIPAL:
                raise InvalidField(
                    "webhooks",
                    f"A principal may hold at most {MAX_WEBHOOKS_PER_PRINCIPAL} webhooks.",
                )
            writer.execute(
                "INSERT INTO {webhooks} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    webhook_id,
                    seq,
                    caller.organization,
                    caller.name,
                    url,
                    json.dumps([] if types is None else list(chosen)),
                    to_principal,
                    secret,
                    created_at,
                ],
            )
            self.consumers.add(writer, webhook_id, KIND, caller.organization, start)
            created = _webhook(_row(writer, webhook_id), ACTIVE)
            self._keep(writer, keep, (created, secret))
            self.presence.announce(writer)
        self.presence.changed()
        return created, secret

    def listing(self, caller: Principal, *, after: int, limit: int) -> list[Webhook]:
        """The caller's subscriptions (an operator's: the organization's), oldest first."""
        statement = "SELECT * FROM {webhooks} WHERE organization = %s AND seq > %s"
        params: list[Any] = [caller.organization, after]
        if not caller.is_operator:
            statement += " AND owner = %s"
            params.append(caller.name)
        rows = self.store.query(statement + " ORDER BY seq LIMIT %s", [*params, limit])
        return self._with_status(rows)

    def get(self, caller: Principal, webhook_id: str) -> Webhook:
        """A subscription the caller may see. Every route by id asks this first, and it reads
        nothing of another organization's: the organization is part of the lookup."""
        rows = self.store.query(
            "SELECT * FROM {webhooks} WHERE webhook_id = %s AND organization = %s",
            [webhook_id, caller.organization],
        )
        if not rows or not _visible(rows[0], caller):
            raise NotFound(f"No webhook {webhook_id}.")
        return self._with_status(rows)[0]

    def delete(self, caller: Principal, webhook_id: str) -> str:
        """Remove the subscription and its delivery state; when it was deleted (read before the
        transaction: nothing after its commit may fail the deletion)."""
        self.get(caller, webhook_id)
        deleted_at = iso(self.clock.now())
        with self.store.writing() as writer:
            gone = writer.fetchall(
                "DELETE FROM {webhooks} WHERE webhook_id = %s RETURNING webhook_id", [webhook_id]
            )
            if not gone:
                raise NotFound(f"No webhook {webhook_id}.")
            self.consumers.remove(writer, webhook_id)
            self.presence.announce(writer)
        self.presence.changed()
        return deleted_at

    def rotate_secret(
        self, caller: Principal, webhook_id: str, keep: Keep = None
    ) -> tuple[Webhook, str]:
        """A new secret, used from the next delivery attempt on; the old one stops at once
        (`keep` as for `create`)."""
        status = self.get(caller, webhook_id).status
        secret = _new_secret()
        with self.store.writing() as writer:
            self._update(writer, webhook_id, "UPDATE {webhooks} SET secret = %s", [secret])
            rotated = _webhook(_row(writer, webhook_id), status)
            self._keep(writer, keep, (rotated, secret))
        return rotated, secret

    def enable(self, caller: Principal, webhook_id: str, keep: Keep = None) -> Webhook:
        """Resume a failing subscription from the event it failed on, with a fresh schedule
        (`keep` as for `create`)."""
        self.get(caller, webhook_id)
        with self.store.writing() as writer:
            self.consumers.enable(writer, webhook_id)
            enabled = _webhook(_row(writer, webhook_id), ACTIVE)
            self._keep(writer, keep, enabled)
            self.presence.announce(writer)
        self.presence.changed()
        return enabled

    def attempts(
        self, caller: Principal, webhook_id: str, *, before: int | None, limit: int
    ) -> list[tuple[int, Attempt]]:
        self.get(caller, webhook_id)
        return self.consumers.attempts(webhook_id, before, limit)

    def for_delivery(self, consumer: Consumer) -> Webhook | None:
        """The subscription a consumer delivers for, as it is now (None once deleted)."""
        rows = self.store.query("SELECT * FROM {webhooks} WHERE webhook_id = %s", [consumer.name])
        return _webhook(rows[0], consumer.status) if rows else None

    def party_of(self, webhook: Webhook) -> str | None:
        """Whose events a subscription delivers, as its owner reads the log: None for all of
        the organization's (a dispatcher's or an operator's), else the owner's own."""
        role = self.keys.role_of(webhook.organization, webhook.owner)
        return None if role in WHOLE_LOG else webhook.owner

    def _keep(self, writer: Writer, keep: Keep, result: Any) -> None:
        if keep is not None:
            self.answers.write_in(writer, [keep(result)])

    def _update(self, writer: Writer, webhook_id: str, statement: str, params: list) -> None:
        gone = not writer.fetchall(
            statement + " WHERE webhook_id = %s RETURNING webhook_id", [*params, webhook_id]
        )
        if gone:
            raise NotFound(f"No webhook {webhook_id}.")

    def _with_status(self, rows: list[Row]) -> list[Webhook]:
        consumers = self.consumers.consumers([row["webhook_id"] for row in rows])
        return [
            _webhook(row, consumers[row["webhook_id"]].status)
            for row in rows
            if row["webhook_id"] in consumers
        ]


def _row(writer: Writer, webhook_id: str) -> Row:
    """A subscription's row as this transaction sees it."""
    rows = writer.fetchall("SELECT * FROM {webhooks} WHERE webhook_id = %s", [webhook_id])
    if not rows:
        raise NotFound(f"No webhook {webhook_id}.")
    return rows[0]


def _visible(row: Row, caller: Principal) -> bool:
    """An owner and the organization's operators see a subscription; nobody else does."""
    return row["organization"] == caller.organization and (
        caller.is_operator or row["owner"] == caller.name
    )


def _webhook(row: Row, status: str) -> Webhook:
    return Webhook(
        webhook_id=row["webhook_id"],
        seq=int(row["seq"]),
        organization=row["organization"],
        owner=row["owner"],
        target=parse_target(row["url"]),
        types=tuple(json.loads(row["types"])) or PUBLISHED,
        to_principal=row["to_principal"],
        created_at=row["created_at"],
        secret=row["secret"],
        status=status,
    )


def _new_secret() -> str:
    """Standard Webhooks' form: the prefix, then 24 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


SCHEMA = [
    "CREATE TABLE IF NOT EXISTS {webhooks} ("
    " webhook_id TEXT PRIMARY KEY, seq BIGINT NOT NULL UNIQUE, organization TEXT NOT NULL,"
    " owner TEXT NOT NULL, url TEXT NOT NULL, types TEXT NOT NULL, to_principal TEXT,"
    " secret TEXT NOT NULL, created_at TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS webhooks_owner ON {webhooks} (organization, owner, seq)",
    "CREATE TABLE IF NOT EXISTS {webhook_sequence} (id INTEGER PRIMARY KEY, value BIGINT NOT NULL)",
]
