"""The roles a key can carry, in a pure module so the command line can list them cheaply."""

AGENT = "agent"
OPERATOR = "operator"
ROLES = (AGENT, OPERATOR)
