"""Where an acquire's CPU goes, in-process (no HTTP server): N acquires through the Falcon app on a
fresh store (a temporary SQLite file, or `--database`: an empty PostgreSQL schema, say), called
as waitress calls it (a WSGI environ, no test client), first timed (CPU per acquire, no
profiler), then under cProfile, with the share of the functions matching each pattern.

    .venv/bin/python bench/profile_acquire.py [--acquires 2000] [--top 30] [--database URL]

Used to decide whether a faster JSON encoder is worth a dependency, and to split a served
acquire's CPU into the command's own and the server's (docs/performance.md).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

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
    parser.add_argument("--database", help="a store to use, empty (default: a new SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        services = bootstrap(args.database or f"sqlite:///{folder}/profile.db", pool_size=4)
        try:
            key = services.keys.create("bench", "agent_bench", "agent")
            app = create_app(services)
            acquire(app, key, 200, "warm")
            started = time.process_time()
            acquire(app, key, args.acquires, "timed")
            cpu = time.process_time() - started
            profile = cProfile.Profile()
            profile.enable()
            acquire(app, key, args.acquires, "profiled")
            profile.disable()
        finally:
            services.close()
    print(f"{args.acquires} acquires, {cpu / args.acquires * 1e3:.3f} ms CPU each (no profiler)")
    stats = pstats.Stats(profile)
    total = sum(entry[2] for entry in stats.stats.values())  # tottime over every function
    print(f"{total / args.acquires * 1e3:.2f} ms profiled CPU each")
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


def acquire(app: Callable[..., Any], key: str, count: int, tag: str) -> None:
    """`count` acquires of new resources, each answered 201."""

    def start_response(status: str, headers: list, exc_info: Any = None) -> None:
        assert status.startswith("201"), status

    for n in range(count):
        body = json.dumps(
            {"resource_type": "t", "resource_id": f"{tag}-{n}", "purpose": "p", "ttl_seconds": 60}
        ).encode()
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/v1/leases",
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8787",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_AUTHORIZATION": f"Bearer {key}",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        b"".join(app(environ, start_response))


if __name__ == "__main__":
    main()
