"""The roles a key can carry, in a pure module so the command line can list them cheaply."""

AGENT = "agent"
DISPATCHER = "dispatcher"
OPERATOR = "operator"
ROLES = (AGENT, DISPATCHER, OPERATOR)
WHOLE_LOG = (DISPATCHER, OPERATOR)
"""The roles that read every event of their organization; an agent reads only its own."""
