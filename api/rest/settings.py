"""How a server runs: every `titen serve` option in one frozen record, with its default.

A pure module (no web framework), so `titen --help` shows the defaults cheaply. The command line
builds one from its flags; `create_app` and `serve` read what they need from it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8787
    threads: int = 16
    """Request worker threads."""
    max_subscribers: int = 64
    """Open event streams and waiting long-polls served at once (each holds a thread)."""
    heartbeat_seconds: float = 15.0
    """Comment line sent on a quiet event stream, to keep proxies from closing it."""
    metrics_port: int | None = None
    """Where Prometheus scrapes /metrics; None serves no metrics."""
    metrics_host: str = "127.0.0.1"
    log_format: str | None = None
    """"json" or "text"; None picks text on a terminal, JSON otherwise."""


DEFAULTS = ServerSettings()
