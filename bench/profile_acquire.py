"""Where an acquire's CPU goes, in-process (no HTTP server): cProfile over N acquires through the
Falcon app on a fresh SQLite store, then the share of the functions matching each pattern.

    .venv/bin/python bench/profile_acquire.py [--acquires 2000] [--top 30]

Used to decide whether a faster JSON encoder is worth a dependency (docs/performance.md).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile

import falcon.testing

from titen.api.rest.app import create_app
from titen.service.bootstrap import bootstrap

SHARES = {
    "JSON encoding (json.encoder)": "json/encoder.py",
    "JSON decoding (json.decoder)": "json/decoder.py",
    "body reading and validation": "api/rest/body.py|api/validation.py|jsonschema",
    "SQLite statements": "sqlite3.Cursor",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--acquires", type=int, default=2000)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        services = bootstrap(f"sqlite:///{folder}/profile.db", pool_size=4)
        try:
            key = services.keys.create("bench", "agent_bench", "agent")
            client = falcon.testing.TestClient(create_app(services))
            acquire(client, key, 200, "warm")
            profile = cProfile.Profile()
            profile.enable()
            acquire(client, key, args.acquires, "measured")
            profile.disable()
        finally:
            services.close()
    stats = pstats.Stats(profile)
    total = sum(entry[2] for entry in stats.stats.values())  # tottime over every function
    print(f"{args.acquires} acquires, {total / args.acquires * 1e3:.2f} ms profiled CPU each")
    for label, pattern in SHARES.items():
        own = sum(
            entry[2]
            for (path, _, name), entry in stats.stats.items()
            if any(part in path or part in name for part in pattern.split("|"))
        )
        print(f"  {label:40} {own / total:6.1%}")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())


def acquire(client: falcon.testing.TestClient, key: str, count: int, tag: str) -> None:
    headers = {"authorization": f"Bearer {key}"}
    for n in range(count):
        body = {
            "resource_type": "t",
            "resource_id": f"{tag}-{n}",
            "purpose": "p",
            "ttl_seconds": 60,
        }
        answer = client.simulate_post("/v1/leases", json=body, headers=headers)
        assert answer.status_code == 201, answer.text


if __name__ == "__main__":
    main()
