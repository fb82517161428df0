"""What the commands count, for Prometheus: one counter per outcome, each defined here once.

A command is counted by the process that ran it, once it committed (or was refused), so with
several worker processes every change is counted once and one scrape sums the workers. No
organization or principal labels: nothing about a tenant leaks to whoever scrapes, and the
number of series stays fixed however many tenants there are.
"""

from __future__ import annotations

from prometheus_client import Counter, disable_created_metrics

from titen.domain.statuses import ACCEPTED, REJECTED

# The `_created` series of every counter adds a timestamp per series that nobody graphs.
disable_created_metrics()

LEASES_ACQUIRED = Counter(
    "titen_leases_acquired", "Leases acquired (a holder's re-acquire counts: it is a new lease)."
)
LEASE_CONFLICTS = Counter(
    "titen_lease_conflicts", "Acquires refused because another principal holds the resource."
)
LEASES_RELEASED = Counter(
    "titen_leases_released", "Leases released by their holder or an operator."
)
HANDOFFS_CREATED = Counter("titen_handoffs_created", "Handoffs created.")
HANDOFFS_RESOLVED = Counter(
    "titen_handoffs_resolved", "Handoffs resolved by their target, by outcome.", ["status"]
)
for _status in (ACCEPTED, REJECTED):
    HANDOFFS_RESOLVED.labels(_status)  # both series exist from the start, at 0

WEBHOOK_OUTCOMES = ("delivered", "rejected", "timeout", "unreachable", "refused")
"""delivered: a 2xx answer; rejected: another status; timeout: no answer in time; unreachable:
no connection or a broken one; refused: the target check refused the address."""
WEBHOOK_DELIVERIES = Counter(
    "titen_webhook_deliveries", "Webhook delivery attempts, by outcome.", ["outcome"]
)
for _outcome in WEBHOOK_OUTCOMES:
    WEBHOOK_DELIVERIES.labels(_outcome)
