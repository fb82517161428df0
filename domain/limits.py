"""The bounds every command enforces, in one pure module that any layer can import cheaply.

The aggregates check them, the REST schemas and the MCP tools publish them; nothing else
restates the numbers.
"""

MIN_TTL_SECONDS = 10
MAX_TTL_SECONDS = 86_400
NAME_LENGTH = 200  # resource types and ids, principals, subject, context and checkpoint ids
PURPOSE_LENGTH = 1000
MESSAGE_LENGTH = 4000
