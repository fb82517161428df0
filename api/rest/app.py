"""The Falcon application: routes, middleware and error handling over the services.
CORS (`--cors-origin`) is Falcon's, on every route and error, never in credentials mode: keys
are bearer tokens, so no page gets ambient authority from a visitor's browser."""

from __future__ import annotations

import re
from inspect import signature
from typing import Any

import falcon

from titen.api.rest import errors, jsonrpc
from titen.api.rest.audit import AuditHandoff, AuditLease, AuditResource
from titen.api.rest.auth import Authentication, Me
from titen.api.rest.body import BodyLimit
from titen.api.rest.events import Events, EventStream, EventTickets, Subscribers
from titen.api.rest.handoffs import HandoffItem, HandoffResolution, Handoffs
from titen.api.rest.health import Health, Ready
from titen.api.rest.idempotency import Idempotency
from titen.api.rest.leases import Lease, Leases
from titen.api.rest.logs import REQUEST_ID, RequestLog
from titen.api.rest.mcp import Mcp
from titen.api.rest.methods import Router
from titen.api.rest.metrics import RequestMetrics
from titen.api.rest.openapi import document
from titen.api.rest.pages import Console, Docs, OpenAPIDocument
from titen.api.rest.paging import StoreCursors
from titen.api.rest.settings import DEFAULTS, ServerSettings
from titen.api.rest.webhooks import (
    WebhookDeliveries,
    WebhookEnable,
    WebhookItem,
    WebhookList,
    WebhookSecret,
)
from titen.service import request_budget
from titen.service.bootstrap import Services
from titen.service.budget import OrgBudget
from titen.service.targets import Targets

EXPOSED = (REQUEST_ID, "Idempotent-Replayed", "WWW-Authenticate", "Allow", jsonrpc.SESSION_HEADER)
"""Answer headers a page may read beyond the CORS-safelisted ones."""
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

ROUTES: tuple[tuple[str, type], ...] = (
    ("/healthz", Health),
    ("/readyz", Ready),
    ("/openapi.json", OpenAPIDocument),
    ("/docs", Docs),
    ("/console", Console),
    ("/v1/me", Me),
    ("/v1/leases", Leases),
    ("/v1/leases/{lease_id}", Lease),
    ("/v1/handoffs", Handoffs),
    ("/v1/handoffs/{handoff_id}", HandoffItem),
    ("/v1/handoffs/{handoff_id}/resolve", HandoffResolution),
    ("/v1/events", Events),
    ("/v1/events/stream", EventStream),
    ("/v1/events/tickets", EventTickets),
    ("/v1/audit/leases", AuditResource),
    ("/v1/audit/leases/{lease_id}", AuditLease),
    ("/v1/audit/handoffs/{handoff_id}", AuditHandoff),
    ("/v1/webhooks", WebhookList),
    ("/v1/webhooks/{webhook_id}", WebhookItem),
    ("/v1/webhooks/{webhook_id}/rotate-secret", WebhookSecret),
    ("/v1/webhooks/{webhook_id}/enable", WebhookEnable),
    ("/v1/webhooks/{webhook_id}/deliveries", WebhookDeliveries),
    (jsonrpc.PATH, Mcp),
)
"""Every route: its URI template and its resource class, whose `contract` the OpenAPI document
shows (`titen openapi` reads this table without building the app)."""


def openapi() -> dict[str, Any]:
    return document(ROUTES)


def create_app(
    services: Services,
    settings: ServerSettings = DEFAULTS,
    budget: OrgBudget | None = None,
) -> falcon.App:
    """The app; with a `budget` (`titen serve --org-rate`: api/rest/server.py), each request
    is counted against its organization's."""
    middleware: list[Any] = [  # each has some of falcon's hooks, no one protocol fits all
        RequestDeadline(),
        RequestLog(),
        StoreCursors(services.cursors),
    ]
    if origins := settings.cors_origins:
        middleware.append(falcon.CORSMiddleware(allow_origins=origins, expose_headers=EXPOSED))
    middleware += [
        RequestMetrics(),
        BodyLimit(),
        Authentication(services.keys, services.tickets, budget),
        PathIds(),
    ]
    app = falcon.App(middleware=middleware, router=Router())
    errors.install(app)
    offered = _offered(services, settings)
    for template, resource in ROUTES:  # each given what its parameters (its fields) name
        names = signature(resource).parameters
        app.add_route(template, resource(**{name: offered[name] for name in names}))
    return app


class RequestDeadline:
    """Each request's one deadline for its database waits (service/request_budget.py): every
    answer comes within 10 s, else 503. A stream's frames wait on the follower, after it ends."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        request_budget.start()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        request_budget.end()


class PathIds:
    """A path id holding a control character names nothing: 404 before any lookup (PostgreSQL's
    text cannot hold NUL: the query would fail, a 500 for a bad id)."""

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if any(isinstance(value, str) and CONTROL.search(value) for value in params.values()):
            raise errors.error(404)


def _offered(services: Services, settings: ServerSettings) -> dict[str, Any]:
    """What a resource's parameter may name: a service, or one of the few things made here."""
    return {
        **vars(services),
        "origins": settings.cors_origins,
        "document": openapi(),
        "idempotency": Idempotency(services.answers),
        "targets": Targets(settings.allow_private_webhooks),
        "subscribers": Subscribers(settings, services.revocations, services.recent_events),
    }
