"""Where a webhook may send: the host's addresses, each one required to be public.

Resolution happens at creation and again before every delivery (DNS may change), and a delivery
connects to the very address that was checked, so a name that resolves to a public address for
the check and a private one for the connection (DNS rebinding) cannot reach inside.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from titen.domain.webhooks import Target, forbidden_address


class TargetRefused(ValueError):
    """The host does not resolve, or resolves to an address webhooks may not reach."""


class Targets:
    def __init__(
        self,
        allow_private: bool = False,
        resolve: Callable[..., list[Any]] = socket.getaddrinfo,
    ):
        self.allow_private = allow_private
        self._resolve = resolve

    def addresses(self, target: Target) -> list[str]:
        """The addresses to connect to, in the resolver's order; TargetRefused if none may be
        used. One forbidden address refuses the host: it could be the one connected to.

        A host that does not resolve and one that resolves to a forbidden address are refused
        in the same words, naming no address: telling them apart, or naming what an internal
        name resolves to, would map the network behind this service for whoever registers."""
        try:
            found = self._resolve(target.host, target.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise TargetRefused(_refusal(target)) from None
        addresses = list(dict.fromkeys(info[4][0] for info in found))
        if not addresses:
            raise TargetRefused(_refusal(target))
        if not self.allow_private and any(forbidden_address(a) for a in addresses):
            raise TargetRefused(_refusal(target))
        return addresses


def _refusal(target: Target) -> str:
    return (
        f"url host {target.host} is not allowed: webhooks may only target hosts that resolve"
        " to public internet addresses."
    )
