"""The log's writer (the stdlib's QueueListener): every record once, in order, formatted off
the logging thread, and a thread that takes no signal."""

from __future__ import annotations

import io
import logging
import os
import signal
import threading
from pathlib import Path
from types import SimpleNamespace

from tests.support import eventually
from titen.api.rest import logs
from titen.api.rest.logs import QueuedLines


class ThreadNoting(logging.Formatter):
    """A formatter that notes which threads formatted records."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def format(self, record: logging.LogRecord) -> str:
        self.threads.add(threading.get_ident())
        return super().format(record)


def writer_over(stream: io.StringIO) -> tuple[logging.Logger, QueuedLines, ThreadNoting]:
    target = logging.StreamHandler(stream)
    formatter = ThreadNoting()
    target.setFormatter(formatter)
    handler = QueuedLines(target)
    logger = logging.Logger("test.queued_lines")
    logger.addHandler(handler)
    return logger, handler, formatter


def test_lines_from_many_threads_are_each_written_once_in_order_off_their_threads():
    stream = io.StringIO()
    logger, handler, formatter = writer_over(stream)
    threads, each = 16, 200

    def log_lines(n: int) -> None:
        for i in range(each):
            logger.warning("%d %d", n, i)

    workers = [threading.Thread(target=log_lines, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    handler.close()  # writes what is queued before it returns
    lines = stream.getvalue().splitlines()
    assert len(lines) == threads * each
    for n in range(threads):
        assert [line for line in lines if line.startswith(f"{n} ")] == [
            f"{n} {i}" for i in range(each)
        ]
    assert formatter.threads.isdisjoint(worker.ident for worker in workers)


def test_the_writer_thread_takes_no_signal_and_its_creator_keeps_its_own():
    """A signal sent to the process must reach a thread that wants it (the supervisor's main
    thread, waiting in sigtimedwait), never the log writer."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    _, handler, _ = writer_over(io.StringIO())
    try:
        assert handler.listener is not None
        thread = handler.listener._thread
        assert thread is not None and thread.native_id is not None
        status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
        blocked = int(
            next(line for line in status.splitlines() if line.startswith("SigBlk:"))[7:], 16
        )
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            assert blocked & (1 << (signum - 1)), signum
        assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
    finally:
        handler.close()


def test_a_forked_child_closes_the_writer_it_inherited_and_writes_through_its_own():
    """The writer's thread is not forked: a worker configures logging again (basicConfig's
    `force` closes the inherited handler first), as api/rest/prefork.py does."""
    read_end, write_end = os.pipe()
    target = logging.StreamHandler(os.fdopen(write_end, "w"))
    handler = QueuedLines(target)
    logger = logging.Logger("test.queued_lines.fork")
    logger.addHandler(handler)
    try:
        pid = os.fork()
        if pid == 0:
            logger.removeHandler(handler)
            handler.close()  # returns: no thread to wait for
            own = QueuedLines(target)
            logger.addHandler(own)
            logger.warning("from the child")
            own.close()
            os._exit(0)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        logger.warning("from the parent")
        handler.close()
        target.stream.close()
        with os.fdopen(read_end) as written:
            assert written.read().splitlines() == ["from the child", "from the parent"]
    finally:
        handler.close()


def test_lines_queued_while_the_writer_rests_are_written_in_one_wake_up(monkeypatch):
    """Once it has written all it found, the writer rests before it waits again, so lines
    arriving meanwhile are written together: under load one wake-up serves many requests."""
    rests: list[float] = []
    allowed = threading.Semaphore(0)

    def rest(seconds: float) -> None:
        rests.append(seconds)
        assert allowed.acquire(timeout=5)

    monkeypatch.setattr(logs, "time", SimpleNamespace(sleep=rest))
    stream = io.StringIO()
    logger, handler, _ = writer_over(stream)
    try:
        eventually(lambda: len(rests) == 1, "the writer resting, with nothing queued")
        for i in range(50):
            logger.warning("%d", i)
        allowed.release()
        eventually(lambda: len(rests) == 2, "the writer resting again")
        assert stream.getvalue().splitlines() == [str(i) for i in range(50)]
        assert rests == [logs.GATHER_SECONDS] * 2
    finally:
        allowed.release()
        handler.close()
