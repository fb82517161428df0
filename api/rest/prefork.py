"""`titen serve --workers N`: N server processes on one port, sharing one database.

Pre-fork: the parent opens the listening sockets (the API's and, if asked, the metrics one),
opens the store once (creating or migrating its schema under the store's lock, and applying
what the log holds beyond the read models), closes it, and only then forks the workers. The
workers accept from the same sockets (the kernel hands each connection to one of them) and
each opens its own connections to the database. Nothing a worker serves depends on which one
serves it: the read models are written in each command's transaction, keys are revoked for
every process through the database (service/revocations.py), and streams follow the log
(projections/recent_events.py).

The parent only supervises, in one thread, with its signals blocked and taken synchronously
(`sigtimedwait`), so no signal can arrive between a fork and the bookkeeping of it:

- SIGTERM or SIGINT (Ctrl-C, which the terminal also sends to every worker) stops every
  worker with SIGTERM, waits up to STOP_SECONDS for them (then kills what is left) and exits 0;
- a worker that exits on its own is logged with its status and replaced at once, unless
  workers died more than DEATHS_ALLOWED times within DEATH_WINDOW_SECONDS: that is a fault
  a restart does not cure, so everything stops and the parent exits 1 for its supervisor
  (systemd, Kubernetes) to act on;
- a worker asks the kernel for SIGTERM if the parent dies, so none outlives it.

The workers share two things the parent makes before it forks them: their slots of the
connections (api/rest/balance.py: each accepts only its share, so a burst of connections does not
all land on one worker) and, on SQLite, the write turn (storage/group_commit.py: their saves
take turns, so commands join a batch while another worker saves). A worker that exits gives up
both: its slot is marked gone, and the turn, if it held it, passes on (storage/shared_mutex.py).

Metrics: the parent makes a fresh PROMETHEUS_MULTIPROC_DIR for the run before anything imports
prometheus-client, the workers write their series there, one scrape of the shared metrics
socket sums them (api/rest/metrics.py), a dead worker's live gauges are dropped (its counters
stay in the sums), and the directory is removed when the parent exits.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from titen.api.rest.balance import Shares
from titen.api.rest.settings import MULTIPROC_ENV, ServerSettings
from titen.api.rest.signals import stop_on_signals
from titen.storage.shared_mutex import SharedMutex

log = logging.getLogger("titen.server")

SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}
POLL_SECONDS = 1.0
"""How often the parent looks for exited workers even without a SIGCHLD (a safety net)."""
STOP_SECONDS = 20.0
"""How long stopping workers may take (waitress gives its busy threads 5 s) before a SIGKILL."""
DEATHS_ALLOWED = 5
DEATH_WINDOW_SECONDS = 60.0
PR_SET_PDEATHSIG = 1


def serve_workers(url: str, settings: ServerSettings, workers: int) -> int:
    """Serve with `workers` processes until stopped; the exit status."""
    with _metrics_dir():  # before this process imports prometheus-client, below
        from titen.api.rest.budget import org_budget
        from titen.api.rest.logs import configure, default_format
        from titen.api.rest.server import announce, listeners, serve
        from titen.service.bootstrap import bootstrap
        from titen.storage.sqlite import shared_progress

        configure(settings.log_format or default_format())
        sock, metrics_sock = listeners(settings)
        opened = bootstrap(url, pool_size=2)  # schema, migrations and catch-up: once, here
        opened.close()
        shares = Shares(workers)
        # SQLite's writers meet at its lock through a busy handler that sleeps; PostgreSQL's
        # queue on its table lock and are woken at once, and a turn there measured slower.
        sqlite = opened.database.kind == "sqlite"
        turn = SharedMutex() if sqlite else None
        checkpoints = shared_progress() if sqlite else None  # the WAL's, kept together
        budget = org_budget(settings)  # each organization's requests, counted by all workers

        def work(slot: int) -> None:
            services = bootstrap(
                url,
                pool_size=settings.pool_size,
                catch_up=False,
                turn=turn,
                checkpoints=checkpoints,
            )
            try:
                serve(services, settings, sock, metrics_sock, shares.join(slot), budget)
            finally:
                services.close()

        def gone(slot: int, pid: int) -> None:
            shares.leave(slot)
            _metrics_gone(pid)

        announce(f"{opened.database.redacted()}, {workers} workers", settings, sock, metrics_sock)
        return Supervisor(workers, work, on_exit=gone).run()


class Supervisor:
    """Keeps `count` forked processes running `work(slot)` until told to stop: each in a slot
    of its own, 0 to count - 1, which a replacement takes over; `on_exit(slot, pid)` is told
    of each that exits."""

    def __init__(
        self, count: int, work: Callable[[int], None], on_exit: Callable[[int, int], None]
    ):
        self.count = count
        self.work = work
        self.on_exit = on_exit
        self.workers: dict[int, tuple[float, int]] = {}  # pid: (when it started, its slot)
        self.deaths: deque[float] = deque()

    def run(self) -> int:
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            for _ in range(self.count):
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
            for pid, status in self._reap():
                log.error("worker %d %s; starting another", pid, _described(status))
                if self._crash_looping():
                    log.error(
                        "workers died %d times within %.0f s: stopping",
                        len(self.deaths),
                        DEATH_WINDOW_SECONDS,
                    )
                    return 1
                self._start()

    def _start(self) -> None:
        parent = os.getpid()
        taken = {slot for _, slot in self.workers.values()}
        slot = min(set(range(self.count)) - taken)
        pid = os.fork()
        if pid == 0:
            self._be_worker(parent, slot)
        self.workers[pid] = (time.monotonic(), slot)
        log.info("worker %d started", pid)

    def _be_worker(self, parent: int, slot: int) -> None:
        """The forked process: run the work, then exit without returning into the parent's
        code (its `finally` blocks are the parent's to run)."""
        status = 1
        try:
            stop_on_signals()
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            _die_with(parent)
            self.work(slot)
            status = 0
        except KeyboardInterrupt:  # stopped while starting
            status = 0
        except BaseException as exc:
            # The database failing as the worker opens it is a condition (a warning without a
            # traceback, as every outage is), and the worker is replaced; anything else a defect.
            from titen.storage.outages import log_failure  # loaded by the work already

            log_failure(log, f"worker {os.getpid()} failed", exc)
        finally:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)

    def _reap(self) -> Iterator[tuple[int, int]]:
        """Each worker that has exited since the last look, with its wait status."""
        while self.workers:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            started = self.workers.pop(pid, None)
            if started is not None:
                self.on_exit(started[1], pid)
                yield pid, status

    def _crash_looping(self) -> bool:
        now = time.monotonic()
        self.deaths.append(now)
        while self.deaths[0] < now - DEATH_WINDOW_SECONDS:
            self.deaths.popleft()
        return len(self.deaths) > DEATHS_ALLOWED

    def _stop_all(self) -> None:
        for pid in self.workers:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        while self.workers and time.monotonic() < deadline:
            for pid, status in self._reap():
                if os.waitstatus_to_exitcode(status) != 0:
                    log.warning("worker %d %s while stopping", pid, _described(status))
            if self.workers:
                signal.sigtimedwait({signal.SIGCHLD}, 0.1)
        for pid in list(self.workers):
            log.error("worker %d did not stop within %.0f s: killed", pid, STOP_SECONDS)
            _signal(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            _, slot = self.workers.pop(pid)
            self.on_exit(slot, pid)


def _described(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def _signal(pid: int, signum: int) -> None:
    with suppress(ProcessLookupError):  # exited already: reaped next
        os.kill(pid, signum)


def _die_with(parent: int) -> None:
    """Have the kernel send this worker SIGTERM when its parent dies (Linux), so that a parent
    killed with SIGKILL leaves no worker serving on; if it died already, stop now."""
    with suppress(OSError, AttributeError):  # not Linux: the parent's stop still ends them
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        raise KeyboardInterrupt


@contextmanager
def _metrics_dir() -> Iterator[str]:
    """A fresh, private PROMETHEUS_MULTIPROC_DIR for this run, which the workers inherit.

    prometheus-client decides when it is first imported whether metrics live in memory or in
    that directory's files, so it must not have been imported yet.
    """
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before its multiprocess directory")
    path = tempfile.mkdtemp(prefix="titen-metrics-")
    os.environ[MULTIPROC_ENV] = path
    try:
        yield path
    finally:
        del os.environ[MULTIPROC_ENV]
        shutil.rmtree(path, ignore_errors=True)


def _metrics_gone(pid: int) -> None:
    """A worker exited: its live gauges (open streams) leave the sums; its counters stay."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)
