"""`titen serve --workers N`: N forked server processes on one port, sharing one database.

The parent binds the port (SO_REUSEPORT, never listening), opens the store once, then forks;
each worker listens on the port itself. The parent takes its signals synchronously
(`sigtimedwait`), so none arrives between a fork and its bookkeeping."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from multiprocessing.process import BaseProcess

from titen.api.rest.connections import listen, stop_on_signals
from titen.api.rest.settings import MULTIPROC_ENV, ServerSettings
from titen.service.outages import log_failure

log = logging.getLogger("titen.server")

SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}
POLL_SECONDS = 1.0  # a look for exited workers even without a SIGCHLD
STOP_SECONDS = 20.0  # for stopping workers, before a SIGKILL (waitress gives threads 5 s)
DEATHS_ALLOWED = 5
DEATH_WINDOW_SECONDS = 60.0
FORK = multiprocessing.get_context("fork")


def serve_workers(url: str, settings: ServerSettings, workers: int) -> int:
    """Serve with `workers` processes until stopped; the exit status."""
    with _run_folder() as folder:  # before this process imports prometheus-client, below
        from titen.api.rest.budget import org_budget
        from titen.api.rest.logs import configure, default_format
        from titen.api.rest.server import announce, listeners, serve
        from titen.service.bootstrap import bootstrap
        from titen.service.sharing import for_workers

        configure(settings.log_format or default_format())
        taken, metrics_sock = listeners(settings, reuse_port=True)
        opened = bootstrap(url, pool_size=2)  # schema, migrations and catch-up: once, here
        opened.close()
        sharing = for_workers(opened.database.kind, folder)
        budget = org_budget(settings, folder)  # each organization's requests, counted by all

        def work() -> None:
            configure(settings.log_format or default_format())  # a writer thread of its own
            sock = listen(settings.host, taken.getsockname()[1], reuse_port=True)
            taken.close()  # the parent's hold on the port, now this worker has its own
            services = bootstrap(
                url,
                pool_size=settings.pool_size,
                catch_up=False,
                turn=sharing.turn(),
                checkpoints=sharing.checkpoints,
            )
            with closing(services):
                serve(services, settings, sock, metrics_sock, budget)

        announce(f"{opened.database.redacted()}, {workers} workers", settings, taken, metrics_sock)
        return Supervisor(work).run(workers)


class Supervisor:
    """Keeps `count` processes (`run`) forked by multiprocessing running `work()`."""

    def __init__(self, work: Callable[[], None]):
        self.work = work
        self.workers: list[BaseProcess] = []
        self.deaths: deque[float] = deque(maxlen=DEATHS_ALLOWED + 1)
        self.lifeline = os.pipe()  # never written: its end tells workers the parent is gone

    def run(self, count: int) -> int:
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            for _ in range(count):
                self._start()
            return self._supervise()
        finally:
            self._stop_all()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)

    def _supervise(self) -> int:
        while True:
            received = signal.sigtimedwait(SIGNALS, POLL_SECONDS)
            if received is not None and received.si_signo != signal.SIGCHLD:
                log.info("stopping %d workers", len(self.workers))
                return 0
            for worker in [worker for worker in self.workers if worker.exitcode is not None]:
                self._gone(worker)
                log.error("worker %d %s; starting another", worker.pid, _ended(worker))
                if self._crash_looping():
                    log.error(
                        "workers died %d times within %.0f s: stopping",
                        len(self.deaths),
                        DEATH_WINDOW_SECONDS,
                    )
                    return 1
                self._start()

    def _start(self) -> None:
        worker = FORK.Process(target=self._be_worker, name="titen-worker")
        worker.start()
        self.workers.append(worker)
        log.info("worker %d started", worker.pid)

    def _be_worker(self) -> None:
        """Run the work, then `os._exit`: multiprocessing's code would wait for the threads left."""
        status = 0
        try:
            stop_on_signals()
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            _stop_with_parent(*self.lifeline)
            self.work()
        except KeyboardInterrupt:  # stopped while starting
            pass
        except BaseException as exc:
            status = 1
            log_failure(log, f"worker {os.getpid()} failed", exc)
        finally:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)

    def _crash_looping(self) -> bool:
        self.deaths.append(time.monotonic())
        full = len(self.deaths) == self.deaths.maxlen
        return full and self.deaths[-1] - self.deaths[0] < DEATH_WINDOW_SECONDS

    def _gone(self, worker: BaseProcess) -> None:
        """Its live gauges (open streams) leave the metrics' sums; its counters stay."""
        from prometheus_client import multiprocess

        self.workers.remove(worker)
        multiprocess.mark_process_dead(worker.pid)

    def _stop_all(self) -> None:
        for worker in self.workers:
            worker.terminate()
        deadline = time.monotonic() + STOP_SECONDS
        for worker in list(self.workers):
            worker.join(max(0.0, deadline - time.monotonic()))
            if worker.exitcode is None:
                log.error("worker %d did not stop within %.0f s: killed", worker.pid, STOP_SECONDS)
                worker.kill()
                worker.join()
            elif worker.exitcode != 0:
                log.warning("worker %d %s while stopping", worker.pid, _ended(worker))
            self._gone(worker)


def _ended(worker: BaseProcess) -> str:
    code = worker.exitcode or 0
    return (
        f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
    )


def _stop_with_parent(read_end: int, write_end: int) -> None:
    """SIGTERM this worker once the parent is gone, however it died: only the parent holds the
    pipe's write end, and nothing is written, so a read returns at its end."""
    os.close(write_end)

    def watch() -> None:
        os.read(read_end, 1)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="titen-parent-watch", daemon=True).start()


@contextmanager
def _run_folder() -> Iterator[str]:
    """A private folder for this run's shared files and metrics (PROMETHEUS_MULTIPROC_DIR):
    prometheus-client decides at its first import whether to use it, so not imported yet."""
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before its multiprocess directory")
    with tempfile.TemporaryDirectory(prefix="titen-run-", ignore_cleanup_errors=True) as path:
        os.environ[MULTIPROC_ENV] = path
        try:
            yield path
        finally:
            del os.environ[MULTIPROC_ENV]
