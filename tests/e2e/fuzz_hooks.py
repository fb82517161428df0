"""Schemathesis hooks for tests/e2e/test_fuzzing.py (loaded through SCHEMATHESIS_HOOKS).

A well-formed Idempotency-Key becomes a fresh one in every generated request, as the contract
asks of clients (one key per logical call). The fuzzer otherwise draws the same short keys
("0", "!") with the same small bodies again and again, across unrelated scenarios: the service
then rightly answers with the first request's stored 201, for a lease that a later step has
since released, and the `ensure_resource_availability` check, which cannot know about replays,
reads that as a created resource gone missing. Malformed keys are left as generated, so the
header's validation is still fuzzed; replays are tested in tests/api/test_idempotency.py.

A well-formed acquire names a fresh resource_id for the same reason: the fuzzer acquires the
same resource ("0") again, which by the contract supersedes the first lease (new lease_id, the
old one 404 on release), and the check reads the superseded lease as a created resource gone
missing. Supersession and conflicts are tested in tests/api/test_leases.py.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import schemathesis

from titen.domain.identifiers import problem

HEADER = "Idempotency-Key"
WELL_FORMED = re.compile(r"[!-~]{1,255}")


@schemathesis.hook
def map_headers(context: Any, headers: dict[str, Any] | None) -> dict[str, Any] | None:
    if headers and isinstance(headers.get(HEADER), str) and WELL_FORMED.fullmatch(headers[HEADER]):
        headers[HEADER] = uuid.uuid4().hex
    return headers


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    operation = context.operation
    if (operation.method.upper(), operation.path) != ("POST", "/v1/leases"):
        return body
    resource_id = body.get("resource_id") if isinstance(body, dict) else None
    if isinstance(resource_id, str) and problem(resource_id) is None:
        body["resource_id"] = uuid.uuid4().hex
    return body
