"""Which events are published to subscribers (the event log, webhooks, the relay), by name.

A pure module of names, so that what validates a subscription (api/schemas.py, loaded by the MCP
server too) needs none of the aggregates; domain/events.py maps the event classes onto them.
A lease's ending is recorded in its history only, never published (spec).
"""

LEASE_ACQUIRED = "lease.acquired"
HANDOFF_CREATED = "handoff.created"
HANDOFF_ACCEPTED = "handoff.accepted"
HANDOFF_REJECTED = "handoff.rejected"

PUBLISHED = (LEASE_ACQUIRED, HANDOFF_CREATED, HANDOFF_ACCEPTED, HANDOFF_REJECTED)
