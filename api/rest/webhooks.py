"""The webhook routes: subscriptions to the organization's event log, pushed as signed POSTs.
A secret is answered once, by create and rotate-secret, never stored with the replayed answer."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import falcon

from titen.api import schemas
from titen.api.rest.auth import principal_of
from titen.api.rest.contract import (
    INSTANT,
    STRING,
    answers,
    array,
    delete,
    fields_of,
    get,
    listing,
    nullable,
    obj,
    post,
)
from titen.api.rest.errors import OUTCOME_UNKNOWN
from titen.api.rest.idempotency import Idempotency
from titen.api.rest.paging import PAGE_QUERY, read_page
from titen.api.validation import validator
from titen.domain.events import PUBLISHED
from titen.service.consumers import ACTIVE, FAILING, Attempt
from titen.service.targets import Targets
from titen.service.webhooks import Webhook, Webhooks

CREATE = validator(schemas.CREATE_WEBHOOK)
WEBHOOK_FIELDS = {
    "webhook_id": STRING,
    "url": STRING,
    "types": array({"type": "string", "enum": list(PUBLISHED)}),
    "to_principal": nullable(STRING),
    "status": {"type": "string", "enum": [ACTIVE, FAILING]},
    "created_at": INSTANT,
}
WEBHOOK = obj(WEBHOOK_FIELDS)
WITH_SECRET = obj({**WEBHOOK_FIELDS, "secret": STRING}, optional=("secret",))
ATTEMPT = obj(fields_of(Attempt, attempted_at=INSTANT))


@dataclass
class WebhookList:
    contract = post(
        "createWebhook",
        "Subscribe a URL to the organization's committed events (the secret is shown once).",
        status=201,
        body=schemas.CREATE_WEBHOOK,
        answer=answers(WITH_SECRET),
        description="Deliveries are signed per Standard Webhooks (docs/webhooks.md).",
        idempotent=True,
    ) | get(
        "listWebhooks",
        "The caller's subscriptions (an operator's: the organization's), oldest first.",
        query=PAGE_QUERY,
        answer=listing("webhooks", WEBHOOK),
    )

    webhooks: Webhooks
    targets: Targets
    idempotency: Idempotency

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.idempotency.post(
            req,
            resp,
            CREATE,
            201,
            partial(self.webhooks.create, targets=self.targets),
            with_secret,
            without_secret,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        page = read_page(req, of_log=False)
        found = self.webhooks.listing(principal_of(req), after=page.after, limit=page.limit + 1)
        resp.media = page.answer("webhooks", found, lambda hook: hook.seq, Webhook.public)


@dataclass
class WebhookItem:
    contract = get(
        "getWebhook",
        "One subscription, without its secret.",
        answer=answers(WEBHOOK),
    ) | delete(
        "deleteWebhook",
        "Unsubscribe: nothing more is delivered.",
        answer=answers(obj({"webhook_id": STRING, "deleted_at": INSTANT})),
        errors=(OUTCOME_UNKNOWN,),
    )

    webhooks: Webhooks

    def on_get(self, req: falcon.Request, resp: falcon.Response, webhook_id: str) -> None:
        resp.media = {"data": self.webhooks.get(principal_of(req), webhook_id).public()}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, webhook_id: str) -> None:
        deleted_at = self.webhooks.delete(principal_of(req), webhook_id)
        resp.media = {"data": {"webhook_id": webhook_id, "deleted_at": deleted_at}}


@dataclass
class WebhookSecret:
    contract = post(
        "rotateWebhookSecret",
        "A new signing secret, shown once; the old one stops at once.",
        answer=answers(WITH_SECRET),
        idempotent=True,
    )

    webhooks: Webhooks
    idempotency: Idempotency

    def on_post(self, req: falcon.Request, resp: falcon.Response, webhook_id: str) -> None:
        rotate = partial(self.webhooks.rotate_secret, webhook_id=webhook_id)
        # No body: the key's scope (this webhook's path) is the whole request.
        self.idempotency.post(req, resp, None, 200, rotate, with_secret, without_secret)


@dataclass
class WebhookEnable:
    contract = post(
        "enableWebhook",
        "Resume a failing subscription from the event it failed on.",
        answer=answers(WEBHOOK),
        idempotent=True,
    )

    webhooks: Webhooks
    idempotency: Idempotency

    def on_post(self, req: falcon.Request, resp: falcon.Response, webhook_id: str) -> None:
        enable = partial(self.webhooks.enable, webhook_id=webhook_id)
        self.idempotency.post(req, resp, None, 200, enable, lambda hook: {"data": hook.public()})


def with_secret(created: tuple[Webhook, str]) -> dict[str, Any]:
    """A subscription with its secret: the one answer that shows it."""
    webhook, secret = created
    return {"data": {**webhook.public(), "secret": secret}}


@dataclass
class WebhookDeliveries:
    contract = get(
        "listWebhookDeliveries",
        "The subscription's delivery attempts, newest first, paged.",
        query=PAGE_QUERY,
        answer=listing("deliveries", ATTEMPT),
    )

    webhooks: Webhooks

    def on_get(self, req: falcon.Request, resp: falcon.Response, webhook_id: str) -> None:
        page = read_page(req, of_log=False)
        found = self.webhooks.attempts(
            principal_of(req), webhook_id, before=page.after or None, limit=page.limit + 1
        )
        resp.media = page.answer(
            "deliveries", found, lambda row: row[0], lambda row: asdict(row[1])
        )


def without_secret(created: tuple[Webhook, str]) -> dict[str, Any]:
    """What is stored to replay that answer: never the secret (it would lie in the answers
    table for a day, and be replayed after a rotation or delete)."""
    return {"data": created[0].public()}
