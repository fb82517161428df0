"""The roles a key can carry, in a pure module so the command line can list them cheaply."""

AGENT = "agent"
OPERATOR = "operator"
ROLES = (AGENT, OPERATOR)


def organization_readers() -> tuple[str, ...]:
    """The roles that read the whole organization rather than what they are party to."""
    return tuple(role for role in ROLES if role != AGENT)
