"""The request log under load: written off the request threads, every line whole, none lost.

The server's stderr is a pipe this test leaves unread while it sends requests, so the log's
writer blocks once the pipe's buffer is full while hundreds of lines are still queued. The
requests must be answered all the same (no request thread waits on the log), and a SIGTERM
must still write every queued line before the process exits.
"""

from __future__ import annotations

import fcntl
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support import TITEN, Http, eventually, free_port

CLIENTS = 16
REQUESTS_EACH = 25
PADDING = "x" * 600  # a long path makes long lines: the pipe fills after a few dozen
F_GETPIPE_SZ = 1032  # Linux fcntl: a pipe's buffer size
OURS = re.compile(r"c[0-9]+-r[0-9]+")
TEXT_LINE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:,]+ [A-Z]+ [a-z][a-z_.]* ")
"""The start of a whole text line of any logger: titen's, or waitress's "Task queue depth" when
all 16 clients find every request thread busy."""


def healthy(url: str) -> bool:
    try:
        return Http(url).request("GET", "/healthz")[0] == 200
    except OSError:
        return False


def request_id(client: int, n: int) -> str:
    return f"c{client}-r{n}"


def client_run(url: str, client: int) -> list[int]:
    """One client's requests, one at a time; the statuses answered."""
    http = Http(url)
    return [
        http.request(
            "GET",
            f"/v1/leases/lease_{PADDING}{client}",
            headers={"X-Request-Id": request_id(client, n)},
        )[0]
        for n in range(REQUESTS_EACH)
    ]


@pytest.mark.parametrize(("log_format", "workers"), [("json", "1"), ("text", "1"), ("json", "2")])
def test_concurrent_requests_each_log_one_whole_line_and_sigterm_writes_the_queue(
    tmp_path, log_format, workers
):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [TITEN, "serve", "--port", str(port), "--workers", workers]
    command += ["--log-format", log_format, "--database", f"sqlite:///{tmp_path}/titen.db"]
    server = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        eventually(lambda: healthy(url), "the server answers /healthz", timeout=30)
        with ThreadPoolExecutor(CLIENTS) as pool:
            runs = list(pool.map(lambda c: client_run(url, c), range(CLIENTS)))
        statuses = [status for run in runs for status in run]
        assert statuses == [401] * (CLIENTS * REQUESTS_EACH)  # all answered, pipe unread
        pipe_size = fcntl.fcntl(server.stderr.fileno(), F_GETPIPE_SZ)
        server.terminate()
        _, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0
    text = err.decode()
    # More was logged than the pipe holds: at the SIGTERM, lines were still queued.
    assert len(err) > 2 * pipe_size
    logged = [request_logged(line, log_format) for line in text.splitlines()]
    ids = [i for i in logged if i is not None and OURS.fullmatch(i)]  # not the health probes
    assert sorted(ids) == sorted(
        request_id(c, n) for c in range(CLIENTS) for n in range(REQUESTS_EACH)
    )
    if workers == "1":  # one writer: a client's lines in the order it was answered
        for client in range(CLIENTS):
            own = [i for i in ids if i.startswith(f"c{client}-")]
            assert own == [request_id(client, n) for n in range(REQUESTS_EACH)]


def request_logged(line: str, log_format: str) -> str | None:
    """The request id of a request line, None for another whole line; fails on a broken one
    (cut, or two records run together)."""
    if log_format == "json":
        record = json.loads(line)
        return record["request_id"] if record["logger"] == "titen.requests" else None
    assert TEXT_LINE.match(line), line
    if " titen.requests " not in line:
        return None
    [found] = re.findall(r" request_id=(\S+)", line)
    return found
