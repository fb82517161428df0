"""The Falcon application: routes, middleware and error handling over the services."""

from __future__ import annotations

import falcon

from titen.api.rest import errors
from titen.api.rest.audit import AuditHandoff, AuditLease, AuditResource
from titen.api.rest.auth import Authentication
from titen.api.rest.body import BodyLimit
from titen.api.rest.events import Events, EventStream, Subscribers
from titen.api.rest.handoffs import HandoffItem, HandoffResolution, Handoffs
from titen.api.rest.health import Health, Ready
from titen.api.rest.leases import Lease, Leases
from titen.api.rest.logs import RequestLog
from titen.api.rest.metrics import RequestMetrics
from titen.api.rest.settings import DEFAULTS, ServerSettings
from titen.service.bootstrap import Services


def create_app(
    services: Services,
    settings: ServerSettings = DEFAULTS,
) -> falcon.App:
    app = falcon.App(
        middleware=[RequestLog(), RequestMetrics(), BodyLimit(), Authentication(services.keys)]
    )
    errors.install(app)
    app.add_route("/healthz", Health())
    app.add_route("/readyz", Ready(services.readiness))
    app.add_route("/v1/leases", Leases(services.leases))
    app.add_route("/v1/leases/{lease_id}", Lease(services.leases))
    app.add_route("/v1/handoffs", Handoffs(services.handoffs))
    app.add_route("/v1/handoffs/{handoff_id}", HandoffItem(services.handoffs))
    app.add_route("/v1/handoffs/{handoff_id}/resolve", HandoffResolution(services.handoffs))
    subscribers = Subscribers(
        settings.max_subscribers, settings.heartbeat_seconds, services.revocations
    )
    log, projector = services.event_log, services.projector
    app.add_route("/v1/events", Events(log, projector, subscribers))
    app.add_route("/v1/events/stream", EventStream(log, projector, subscribers))
    app.add_route("/v1/audit/leases", AuditResource(services.auditor))
    app.add_route("/v1/audit/leases/{lease_id}", AuditLease(services.auditor))
    app.add_route("/v1/audit/handoffs/{handoff_id}", AuditHandoff(services.auditor))
    return app
