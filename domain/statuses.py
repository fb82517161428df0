"""A handoff's statuses, in a pure module so the wire schemas can name them cheaply."""

PENDING = "pending"
ACCEPTED = "accepted"
REJECTED = "rejected"
