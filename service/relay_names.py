"""How the NATS relay's consumers are named in the consumer table (service/consumer_table.py).

Apart from the relay (service/relay.py) so that `/metrics`, which reports each relay's lag by
name, does not load the NATS client into every server process.
"""

from __future__ import annotations

KIND = "relay"


def consumer_name(name: str) -> str:
    """The consumer-table name of the relay started with `--name NAME`."""
    return f"relay:{name}"


def relay_name(consumer: str) -> str:
    """The relay's own name (`--name`) from its consumer's."""
    return consumer.removeprefix("relay:")
