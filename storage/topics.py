"""Where stored events' topics point after the code moved into the `titen` namespace.

Every stored event and snapshot names its class by topic (`module:Class`). Releases before the
namespace wrote `domain.lease:Lease.Acquired` and `domain.handoff:Handoff.Created`; registering
the old module names as aliases of the modules that now hold those classes lets any store written
by an earlier release load unchanged (tests/integration/test_previous_release.py).
"""

from __future__ import annotations

from eventsourcing.utils import register_topic

from titen.domain import handoff, lease

LEGACY_MODULES = {"domain.lease": lease, "domain.handoff": handoff}


def register_legacy_topics() -> None:
    """Resolve the previous release's module names to today's (idempotent)."""
    for old, module in LEGACY_MODULES.items():
        register_topic(old, module)
