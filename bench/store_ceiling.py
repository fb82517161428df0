"""The event store's own ceiling: how many new leases per second it records, with no HTTP and
no projection, so an acquire's figure in bench/leases.py can be read against it.

Each thread creates new Lease aggregates (one acquire each) and saves them:
- `library save`: the eventsourcing Application's `save`, one aggregate per transaction, as
  the library is used out of the box;
- `group commit`: the path Titen's commands take (`domain/group_commit.py`), where saves that
  arrive while one is under way share the next transaction.

    .venv/bin/python bench/store_ceiling.py --backend both
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from itertools import count
from uuid import uuid4

from leases import database

from titen.domain.ids import LEASE, new_id
from titen.domain.lease import Lease
from titen.service.bootstrap import Services, bootstrap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--threads", default="1,8,16", help="comma-separated thread counts")
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    for backend in backends:
        with database(args, backend) as url:
            services = bootstrap(url, pool_size=32)
            try:
                for threads in (int(n) for n in args.threads.split(",")):
                    for label, save in (
                        ("library save", services.app.save),
                        ("group commit", services.app.commits.save),
                    ):
                        rate, cpu_ms = measure(services, save, threads, args.seconds)
                        print(
                            f"{backend:8} {label:12} {threads:2} threads: {rate:7,.0f} leases/s,"
                            f" client CPU {cpu_ms:.2f} ms per lease",
                            flush=True,
                        )
            finally:
                services.close()


def measure(
    services: Services, save: Callable[..., object], threads: int, seconds: float
) -> tuple[float, float]:
    """Leases saved per second, and this process's CPU per lease."""
    numbers = count()
    tag = uuid4().hex  # every measurement leases resources of its own
    saved = [0] * threads
    stop = threading.Event()
    now = services.clock.now()

    def work(slot: int) -> None:
        while not stop.is_set():
            resource = ("bench", "ceiling", f"{tag}-{next(numbers)}")
            lease = Lease(services.app.resource_keys.of(*resource), *resource)
            lease.acquire(lease_id=new_id(LEASE), holder="a", purpose="p", now=now, ttl_seconds=60)
            save(lease)
            saved[slot] += 1

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    started, cpu = time.monotonic(), time.process_time()
    for worker in workers:
        worker.start()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join()
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    return sum(saved) / elapsed, cpu / sum(saved) * 1000


if __name__ == "__main__":
    main()
