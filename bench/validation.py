"""Microseconds to accept one valid request body: the fast path `refusal` takes against the
worded path it keeps for refusals (jsonschema with titen's pattern rules), in one run.

    .venv/bin/python bench/validation.py [--rounds 20000]

Why the fast path exists: docs/performance.md, "Request bodies and JSON".
"""

from __future__ import annotations

import argparse
import timeit
from typing import Any

from titen.api import schemas
from titen.api.validation import lone_surrogate, refusal, validator

BODIES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "acquire": (
        schemas.ACQUIRE,
        {
            "resource_type": "repository",
            "resource_id": "acme/widgets#4711",
            "purpose": "deploy release 4.2 to production",
            "ttl_seconds": 300,
        },
    ),
    "create handoff": (
        schemas.CREATE_HANDOFF,
        {
            "to_principal": "agent_reviewer",
            "subject_id": "pr-4711",
            "context_id": "ctx-9",
            "checkpoint_id": "cp-3",
            "message": "Tests pass; please review the migration.",
        },
    ),
    "resolve handoff": (schemas.RESOLVE_HANDOFF, {"status": "accepted"}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20000)
    args = parser.parse_args()
    print(f"{'body':<16} {'fast µs':>8} {'worded µs':>10} {'ratio':>6}")
    for name, (schema, body) in BODIES.items():
        checker = validator(schema)
        assert refusal(body, checker) is None

        def worded(checker: Any = checker, body: dict[str, Any] = body) -> bool:
            return not any(checker.explain.iter_errors(body)) and lone_surrogate(body) is None

        fast = per_call(lambda checker=checker, body=body: refusal(body, checker), args.rounds)
        slow = per_call(worded, args.rounds)
        print(f"{name:<16} {fast:>8.1f} {slow:>10.1f} {slow / fast:>5.1f}x")


def per_call(call: Any, rounds: int) -> float:
    """The best of three timings, in microseconds per call."""
    return min(timeit.repeat(call, number=rounds, repeat=3)) / rounds * 1e6


if __name__ == "__main__":
    main()
