"""Logs as a log pipeline reads them: one line per request, JSON or text, with a request id.
A record's `fields` (`extra={"fields": {...}}`) become JSON keys or `key=value` pairs; a request
line holds no key, body or query string. Lines are written off the request threads: a handler
lock held through each write starved waitress's loop."""

from __future__ import annotations

import json
import logging
import queue
import random
import re
import signal
import sys
import time
from datetime import UTC, datetime
from logging.handlers import QueueHandler, QueueListener
from typing import Any

import falcon

from titen.domain.clock import iso

REQUEST_ID = "X-Request-Id"
PLAUSIBLE_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")
UNMATCHED = "unmatched"  # the route of a request that matched none (not its raw path)

log = logging.getLogger("titen.requests")
GATHER_SECONDS = 0.05  # how long the writer lets lines gather once the queue is dry
_ENCODE = json.JSONEncoder(default=str).encode  # `json.dumps` with an option makes one a call


def default_format() -> str:
    """Text for a person at a terminal, JSON for everything else."""
    return "text" if sys.stderr.isatty() else "json"


def configure(format: str) -> None:
    """Every record to stderr in `format`, at INFO and above, through `QueuedLines`."""
    # No line shows them: not collecting them spares every record two lookups and a stack walk
    # for its caller's file and line (the logging HOWTO's "Optimization").
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if format == "json" else TextFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[QueuedLines(handler)], force=True)


class QueuedLines(QueueHandler):
    """The stdlib's QueueHandler with its QueueListener writing to `target`. A record is queued
    unformatted (formatting is most of a line's cost, here off the request thread). A fork has
    no listener thread: a worker configures logging again (api/rest/prefork.py)."""

    def __init__(self, target: logging.Handler):
        super().__init__(queue.SimpleQueue())
        self.listener: QueueListener | None = _GatheringListener(self.queue, target)
        # Its thread takes no signal: the supervisor waits for its signals blocked
        # (`sigtimedwait`), and the kernel hands one to any thread that does not block it.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            self.listener.start()  # its thread inherits the mask
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record

    def close(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.stop()
        super().close()


class _GatheringListener(QueueListener):
    """Lets lines gather for GATHER_SECONDS once the queue is dry: under load it wakes a few
    times a second, not once per request (each wake takes the GIL from request threads)."""

    queue: queue.SimpleQueue[logging.LogRecord]

    def dequeue(self, block: bool) -> logging.LogRecord:
        try:
            return self.queue.get_nowait()
        except queue.Empty:
            time.sleep(GATHER_SECONDS)
            return super().dequeue(block)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, pid, fields, traceback."""

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
    """`time LEVEL logger message key=value…`; what a client sent is escaped (`\\xNN`) or quoted
    so that it cannot pass for more pairs or lines."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", {})
        pairs = "".join(f" {name}={_field(value)}" for name, value in fields.items())
        return escape(super().formatMessage(record)) + pairs


UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Controls (C0, DEL, C1) and the Unicode line and paragraph separators."""
LOOSE = re.compile(r'[\s="]')


def escape(text: str) -> str:
    """`text` on one line, every unsafe character and backslash escaped as Python writes it."""
    return UNSAFE.sub(_escaped, text.replace("\\", "\\\\"))


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _field(value: object) -> str:
    text = str(value)
    return json.dumps(text) if LOOSE.search(text) else escape(text)


def quoted_path(path: str) -> str:
    """A path in double quotes, a quote in it written `%22`: nothing in it reads as a field."""
    return '"' + path.replace('"', "%22") + '"'


def route(req: falcon.Request) -> str:
    return req.uri_template or UNMATCHED


class RequestLog:
    """Falcon middleware, first in line: gives each request its id and logs one line for it."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.started = time.perf_counter()
        offered = req.get_header(REQUEST_ID, default="")
        req.context.request_id = offered if PLAUSIBLE_ID.fullmatch(offered) else new_request_id()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        resp.set_header(REQUEST_ID, req.context.request_id)
        status = resp.status_code
        level = _level(status)
        if not log.isEnabledFor(level):  # else its arguments would be made for nothing
            return
        elapsed_ms = round((time.perf_counter() - req.context.started) * 1000, 3)
        principal = getattr(req.context, "principal", None)
        log.log(
            level,
            "%s %s %d %.1fms",
            req.method,
            quoted_path(req.path),
            status,
            elapsed_ms,
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


def new_request_id() -> str:
    """128 bits from `random` (reseeded in each fork): `os.urandom` releases the GIL, a hand-off
    per request, and an id needs to be unique, not secret."""
    return f"{random.getrandbits(128):032x}"


def _level(status: int) -> int:
    if status == 500:
        return logging.ERROR
    return logging.WARNING if status > 500 else logging.INFO
