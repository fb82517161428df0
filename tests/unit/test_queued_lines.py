"""The log writer: every record once, in order, soon, and written in batches under load."""

from __future__ import annotations

import io
import logging
import select
import signal
import threading
import time
from pathlib import Path

from tests.support import eventually
from titen.api.rest.logs import GATHER_SECONDS, QueuedLines, atomic_chunks


class CountingStream(io.StringIO):
    """A stream that counts the writes made to it."""

    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def writer_over(stream: CountingStream) -> tuple[logging.Logger, QueuedLines]:
    handler = QueuedLines(logging.StreamHandler(stream))
    logger = logging.Logger("test.queued_lines")
    logger.addHandler(handler)
    return logger, handler


def test_a_lone_line_is_written_well_within_a_second():
    stream = CountingStream()
    logger, handler = writer_over(stream)
    try:
        time.sleep(GATHER_SECONDS * 2)  # the writer is asleep on an empty queue
        logger.warning("alone")
        eventually(lambda: "alone" in stream.getvalue(), "the line written", 1, every=0.005)
        assert stream.getvalue() == "alone\n"
    finally:
        handler.close()


def test_lines_from_many_threads_are_each_written_once_in_order_and_in_batches():
    stream = CountingStream()
    logger, handler = writer_over(stream)
    threads, each = 16, 200
    start = threading.Barrier(threads)

    def log_lines(n: int) -> None:
        start.wait()
        for i in range(each):
            logger.warning("t%d-%d", n, i)

    workers = [threading.Thread(target=log_lines, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    handler.close()  # writes whatever is still queued
    lines = stream.getvalue().splitlines()
    assert len(lines) == threads * each
    for n in range(threads):
        assert [line for line in lines if line.startswith(f"t{n}-")] == [
            f"t{n}-{i}" for i in range(each)
        ]
    # One write per wake-up, each taking everything queued: far fewer writes than lines.
    assert stream.writes < len(lines) / 10


def test_a_write_holds_whole_lines_and_no_more_than_a_pipe_writes_in_one_piece():
    stream = CountingStream()
    logger, handler = writer_over(stream)
    chunks: list[str] = []
    stream.write = lambda text: chunks.append(text) or len(text)  # type: ignore[method-assign]
    lines = [f"{n:03d} " + "x" * 600 for n in range(40)] + ["é" * 3000, "y" * 9000, "z"]
    for line in lines:
        logger.warning(line)
    handler.close()
    assert "".join(chunks).splitlines() == lines
    for chunk in chunks:
        assert chunk.endswith("\n")
        size = len(chunk.encode())
        assert size <= select.PIPE_BUF or chunk.count("\n") == 1  # only a lone long line is longer
    assert len(chunks) < len(lines) / 3  # still batched


def test_lines_are_measured_in_the_streams_encoding():
    # é is 2 bytes in UTF-8 and 4 in ASCII with backslash escapes: two lines of 750 fit one
    # pipe write (3,002 bytes) in the first and not (6,002) in the second.
    line = "é" * 750 + "\n"
    assert len(atomic_chunks([line, line], "utf-8", "strict")) == 1
    assert len(atomic_chunks([line, line], "ascii", "backslashreplace")) == 2
    unencodable = "\ud800\n"  # a lone surrogate: written alone, and the stream reports it
    assert atomic_chunks(["a\n", unencodable, "b\n"], "utf-8", "strict") == [
        "a\n",
        unencodable,
        "b\n",
    ]


def test_the_writer_thread_takes_no_signal_and_its_creator_keeps_its_own():
    """A signal sent to the process must reach a thread that wants it (the supervisor's main
    thread, waiting in sigtimedwait), never the log writer."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    _, handler = writer_over(CountingStream())
    try:
        writer = handler._writer
        assert writer is not None and writer.native_id is not None
        status = Path(f"/proc/self/task/{writer.native_id}/status").read_text()
        blocked = int(
            next(line for line in status.splitlines() if line.startswith("SigBlk:"))[7:], 16
        )
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            assert blocked & (1 << (signum - 1)), signum
        assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
    finally:
        handler.close()
