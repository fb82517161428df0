"""The organization's request budget at the HTTP edge: `titen serve --org-rate`, and its 429."""

from __future__ import annotations

import math
import os

import falcon

from titen.api.rest.errors import error
from titen.api.rest.settings import ServerSettings
from titen.service.budget import BURST_SECONDS, OrgBudget, Policy

POLICY_NAME = "org"  # in the RateLimit fields


def org_budget(settings: ServerSettings, folder: str | None = None) -> OrgBudget | None:
    """The node's budget (None with `--org-rate 0`), made before any fork (its lock in `folder`)."""
    if settings.org_rate <= 0:
        return None
    lock = None if folder is None else os.path.join(folder, "org-budget")
    return OrgBudget(settings.org_rate, lock)


def over_budget(policy: Policy, wait: float) -> falcon.HTTPError:
    """429 with `Retry-After` and draft-ietf-httpapi-ratelimit-headers' fields."""
    seconds = max(1, math.ceil(wait))
    refused = error(
        429,
        f"This organization is over its request budget on this server ({policy.rate:g} "
        f"requests a second, bursts of {policy.burst}); retry in {seconds} s.",
    )
    refused.headers = {  # in place of errors.Refusal's fixed Retry-After
        "Retry-After": str(seconds),
        "RateLimit-Policy": f'"{POLICY_NAME}";q={policy.burst};w={BURST_SECONDS}',
        "RateLimit": f'"{POLICY_NAME}";r=0;t={seconds}',
    }
    return refused
