"""Logs as a log pipeline reads them: one line per request, JSON or text, with a request id.

Plain `logging` with a formatter of our own: every line, the server's own included, comes out in
the chosen format, and a record's `fields` (passed as `extra={"fields": {...}}`) become keys of
the JSON object or `key=value` pairs of the text line. A request line never holds a key, a body
or a query string: only the request's shape and who made it.

Lines are written off the request thread: a request thread only puts its record on a queue
(no lock, no I/O, no formatting), and one writer thread per process formats and writes them to
stderr in the order they were put (`QueuedLines`). A contended handler lock was a convoy: 16
request threads queued on it behind each other's writes and starved waitress's I/O loop
(docs/performance.md, issue 21). The writer wakes for a line, writes it and whatever else is
queued in as few writes as keep lines whole (`atomic_chunks`), then lets lines gather for
`GATHER_SECONDS` before looking again: under load a request costs no thread wake-up of its own,
and a line still reaches stderr within a fraction of a second. `logging.shutdown()` (at exit,
and at a worker's end) writes what is still queued, so a SIGTERM loses no line.

`X-Request-Id` is taken from the request when it is a plausible id (so a proxy's id carries
through) and made otherwise; it is on every answer, errors included, and on every line logged
about the request, so a 500's traceback can be found from the id the client saw.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import re
import select
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from logging.handlers import QueueHandler
from typing import Any

import falcon

from titen.domain.clock import iso

REQUEST_ID = "X-Request-Id"
FORMATS = ("json", "text")
# Anything else (too long, spaces, control characters) could forge log lines: a new id is made.
PLAUSIBLE_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")
UNMATCHED = "unmatched"
"""The route of a request that matched no route (its path is not a template, and could be
anything a client sends)."""

log = logging.getLogger("titen.requests")
GATHER_SECONDS = 0.05
"""How long the log writer lets lines gather after a write before it looks at the queue again."""
_ENCODE = json.JSONEncoder(default=str).encode
"""One encoder for every JSON line (`json.dumps` with an option builds a new one per call)."""


def default_format() -> str:
    """Text for a person at a terminal, JSON for everything else (a file, a pipe, a collector)."""
    return "text" if sys.stderr.isatty() else "json"


def configure(format: str) -> None:
    """Send every log record to stderr in `format` ("json" or "text"), at INFO and above,
    through a writer thread (`QueuedLines`)."""
    # No line shows the thread or the multiprocessing name: not collecting them spares every
    # record two lookups (the logging documentation's "Optimization").
    logging.logThreads = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if format == "json" else TextFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[QueuedLines(handler)], force=True)


class QueuedLines(QueueHandler):
    """A handler that only queues records; a thread of its own hands them to `target` in order.

    Nothing is done to a record on the logging thread: it is queued as it is and formatted by
    the writer (the standard `prepare` formats and copies it on the caller's thread, most of a
    line's cost). The queue is a `SimpleQueue`, safe without the handler's lock, so the lock is
    not taken either. A forked worker gets a queue and a writer of its own (the parent's thread
    does not exist in the child); closing the handler, as `logging.shutdown()` does, writes
    everything queued before it returns.
    """

    def __init__(self, target: logging.StreamHandler):
        super().__init__(queue.SimpleQueue())
        self.target = target
        self._writer: _Writer | None = self._start()
        os.register_at_fork(after_in_child=self._restart)

    def createLock(self) -> None:
        """No lock: putting on a SimpleQueue is atomic (Handler.acquire skips a None lock)."""
        self.lock = None

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record

    def close(self) -> None:
        """Write what is queued, then stop the writer (idempotent)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.stop()
        self.target.flush()
        super().close()

    def _start(self) -> _Writer:
        """A new queue (the handler's) and a writer thread taking from it, which takes no
        signal.

        The kernel hands a signal sent to the process to any thread that does not block it.
        `titen serve --workers`'s supervisor waits for its signals with them blocked
        (`sigtimedwait`, api/rest/prefork.py); one handed to this thread instead reached it a
        second later as a KeyboardInterrupt, past its orderly stop and its log line (a
        Ctrl-C test failed now and then). A thread inherits its creator's mask, so all are
        blocked while it is created."""
        lines: queue.SimpleQueue[logging.LogRecord | None] = queue.SimpleQueue()
        self.queue = lines
        writer = _Writer(lines, self.target)
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            writer.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        return writer

    def _restart(self) -> None:
        """In a forked child: the parent's writer thread was not copied, nor should the
        records it has still to write be written twice."""
        if self._writer is not None:
            self._writer = self._start()


class _Writer(threading.Thread):
    """The thread that formats queued records and writes them to `target`'s stream, in order.

    Asleep until a record is queued; then it writes that record and every other one already
    queued in as few writes as keep each line whole (`atomic_chunks`), and waits
    `GATHER_SECONDS` (or until stopped) before looking again, so that a busy server wakes it a
    few times a second, not once per request.
    """

    def __init__(
        self, lines: queue.SimpleQueue[logging.LogRecord | None], target: logging.StreamHandler
    ):
        super().__init__(name="titen-log-writer", daemon=True)
        self.lines = lines
        self.target = target
        self.stopping = threading.Event()

    def run(self) -> None:
        while True:
            batch = [self.lines.get()]
            while True:
                try:
                    batch.append(self.lines.get_nowait())
                except queue.Empty:
                    break
            self._write([record for record in batch if record is not None])
            if None in batch:
                return
            self.stopping.wait(GATHER_SECONDS)

    def stop(self) -> None:
        """Write what is queued now, then end the thread."""
        self.stopping.set()
        self.lines.put(None)
        self.join()

    def _write(self, records: list[logging.LogRecord]) -> None:
        lines = []
        for record in records:
            try:
                lines.append(self.target.format(record) + self.target.terminator)
            except Exception:
                self.target.handleError(record)  # as StreamHandler.emit would: the rest go on
        try:
            stream = self.target.stream
            encoding = getattr(stream, "encoding", None) or "utf-8"
            for chunk in atomic_chunks(lines, encoding, getattr(stream, "errors", None)):
                self.target.stream.write(chunk)
                self.target.flush()
        except Exception:
            if records:
                self.target.handleError(records[-1])


def atomic_chunks(lines: list[str], encoding: str, errors: str | None) -> list[str]:
    """`lines` joined into as few writes as possible, each of whole lines and at most
    `select.PIPE_BUF` bytes (in the stream's `encoding`, with its `errors`) unless one line
    alone is longer.

    The workers of `titen serve --workers N` and their supervisor share one stderr; a pipe writes
    at most `PIPE_BUF` bytes in one piece, and a longer write, once the pipe is full, goes out in
    parts that another process's line can land between (seen: half a JSON line, then a line of
    the supervisor's).
    """
    chunks: list[str] = []
    chunk: list[str] = []
    size = 0
    for line in lines:
        length = _size(line, encoding, errors)
        if chunk and size + length > select.PIPE_BUF:
            chunks.append("".join(chunk))
            chunk, size = [], 0
        chunk.append(line)
        size += length
    if chunk:
        chunks.append("".join(chunk))
    return chunks


def _size(line: str, encoding: str, errors: str | None) -> int:
    """The bytes `line` takes in the stream; PIPE_BUF (a write of its own) when the stream
    cannot encode it, which its write will then report."""
    if line.isascii():
        return len(line)
    try:
        return len(line.encode(encoding, errors or "strict"))
    except (UnicodeError, LookupError):
        return select.PIPE_BUF


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the process (which worker, with
    `titen serve --workers`), the record's fields, traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": iso(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
            **getattr(record, "fields", {}),
        }
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return _ENCODE(line)


class TextFormatter(logging.Formatter):
    """`time LEVEL logger message key=value…`, then the traceback, if any, on its own lines.

    What a client sent (a path, decoded: `%0A` is a line break) reaches the message and the
    fields, so both are escaped: a control or line-separating character is written as `\\xNN` or
    `\\uNNNN`, and a field value that could pass for more pairs (a space, `=`, a quote) is quoted
    as JSON. One record is one line, whatever the request held. (JSON lines are escaped by
    `json.dumps` already.)
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", {})
        pairs = "".join(f" {name}={_field(value)}" for name, value in fields.items())
        return escape(super().formatMessage(record)) + pairs


UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\\\\]")
"""Characters a text line cannot show as they are: controls (C0, DEL, C1 with NEL), the Unicode
line and paragraph separators, and the backslash that starts an escape."""
LOOSE = re.compile(r'[\s="]')


def escape(text: str) -> str:
    """`text` on one line, every unsafe character escaped as Python writes it."""
    return UNSAFE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\\":
        return "\\\\"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _field(value: object) -> str:
    text = str(value)
    return json.dumps(text) if LOOSE.search(text) else escape(text)


def quoted_path(path: str) -> str:
    """A request line's path in double quotes, a quote in it written `%22` as in a URL: in the
    text line `GET "/x status=200 organization=acme" 200` nothing the path holds reads as a
    field of the line."""
    return '"' + path.replace('"', "%22") + '"'


def request_id(req: falcon.Request) -> str | None:
    """The id of the request being served (None before RequestLog saw it)."""
    return getattr(req.context, "request_id", None)


def route(req: falcon.Request) -> str:
    """The template of the route that served the request: bounded, and names no id."""
    return req.uri_template or UNMATCHED


class RequestLog:
    """Falcon middleware, first in line: gives each request its id and logs one line for it."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.started = time.perf_counter()
        offered = req.get_header(REQUEST_ID)
        fits = offered is not None and PLAUSIBLE_ID.fullmatch(offered)
        req.context.request_id = offered if fits else new_request_id()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        resp.set_header(REQUEST_ID, req.context.request_id)
        elapsed_ms = round((time.perf_counter() - req.context.started) * 1000, 3)
        principal = getattr(req.context, "principal", None)
        status = resp.status_code
        level = _level(status)
        if not log.isEnabledFor(level):
            return
        # The record is made here, not by `log.log`, which would walk the stack for a caller's
        # file and line that no line shows.
        record = log.makeRecord(
            log.name,
            level,
            __file__,
            0,
            "%s %s %d %.1fms",
            (req.method, quoted_path(req.path), status, elapsed_ms),
            None,
            extra={
                "fields": {
                    "request_id": req.context.request_id,
                    "method": req.method,
                    "route": route(req),
                    "path": req.path,
                    "status": status,
                    "duration_ms": elapsed_ms,
                    "organization": principal.organization if principal else None,
                    "principal": principal.name if principal else None,
                }
            },
        )
        log.handle(record)


def new_request_id() -> str:
    """128 random bits in hex, from the process's pseudo-random generator, not the kernel's:
    `os.urandom` releases the interpreter lock around its system call, and at 16 connections
    every release hands the lock to another thread and back (an id needs to be unique, not
    secret). `random` reseeds from the kernel in every forked worker, so workers never share a
    sequence."""
    return f"{random.getrandbits(128):032x}"


def _level(status: int) -> int:
    """A 500 is a defect; another 5xx (unavailable, overloaded) a condition; the rest normal."""
    if status == 500:
        return logging.ERROR
    return logging.WARNING if status > 500 else logging.INFO
