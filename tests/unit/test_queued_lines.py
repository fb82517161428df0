"""The log writer: every record once, in order, soon, and written in batches under load."""

from __future__ import annotations

import io
import logging
import threading
import time

from titen.api.rest.logs import GATHER_SECONDS, QueuedLines


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
        deadline = time.monotonic() + 1
        while "alone" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.005)
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
