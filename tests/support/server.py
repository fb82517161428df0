"""A real `titen serve` process, and the processes it runs."""

from __future__ import annotations

import json as jsonlib
import os
import subprocess
import tempfile
from pathlib import Path

from tests.support.client import Http
from tests.support.commands import TITEN
from tests.support.ports import free_port
from tests.support.waiting import eventually

STARTUP_BOUND = 120  # seconds a test server may take to answer /healthz (Server._wait_healthy)


class Server:
    """A real `titen serve` process on a free port."""

    def __init__(
        self,
        database: str,
        threads: int = 8,
        *options: str,
        port: int = 0,
        own_group: bool = False,
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        prefix: tuple[str, ...] = (),
    ):
        """`own_group`: the server leads a process group of its own, as a shell job does, so
        that a test can send the group what a terminal sends on Ctrl-C. `env`: variables added
        to the server's environment (a faked clock, tests/e2e/test_clocks.py). `prefix` runs it
        through another command (`ip netns exec NS`: tests/cluster), listening on `host`."""
        self.database = database
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}"
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in stop/kill)
        self.log = ""
        self.process = subprocess.Popen(
            [
                *prefix,
                TITEN,
                "serve",
                "--host",
                host,
                "--port",
                str(self.port),
                "--threads",
                str(threads),
                "--database",
                database,
                # One process unless a test asks for workers: limits and counts are per process.
                *([] if "--workers" in options else ["--workers", "1"]),
                *options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            process_group=0 if own_group else None,
            env=None if env is None else {**os.environ, **env},
        )
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        # A bound for a hung start, not a pace: on 2 cores shared by the suite's processes (and
        # four servers starting at once in test_startup), a healthy start has taken over 30 s.
        try:
            eventually(self._healthy, "/healthz answered", STARTUP_BOUND, every=0.05)
        except AssertionError:
            self.stop()
            raise RuntimeError(f"titen serve did not become healthy in {STARTUP_BOUND} s") from None

    def _healthy(self) -> bool:
        """Whether /healthz answers 200; RuntimeError, with what it said, once it has exited."""
        if self.process.poll() is not None:
            self._collect_log()
            raise RuntimeError(f"titen serve exited: {self.log}")
        try:
            return Http(self.url).request("GET", "/healthz")[0] == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._collect_log()

    def kill(self) -> None:
        """End the process without any chance to clean up, as a crash would."""
        self.process.kill()
        self.process.wait()
        self._collect_log()

    @property
    def metrics_port(self) -> int:
        """The port its metrics listen on (it was started with `--metrics-port`)."""
        args = self.process.args
        assert isinstance(args, list)
        return int(args[args.index("--metrics-port") + 1])

    def log_so_far(self) -> str:
        """What the server has written to stderr until now, while it runs (read without moving
        the file's offset, which the server's processes write at)."""
        if self._log.closed:
            return self.log
        fd = self._log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def log_lines(self) -> list[dict]:
        """The complete JSON lines of `log_so_far` (a server started with --log-format json):
        a line a worker is still writing is left for the next read."""
        text = self.log_so_far()
        complete = text[: text.rfind("\n") + 1]
        return [jsonlib.loads(line) for line in complete.splitlines() if line.startswith("{")]

    def _collect_log(self) -> None:
        """Keep what the server wrote to stderr (its request log) as `self.log`."""
        if not self._log.closed:
            self._log.seek(0)
            self.log = self._log.read()
            self._log.close()


def child_pids(pid: int) -> set[int]:
    """The live processes whose parent is `pid` (zombies not counted: they serve nothing)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        state, parent = stat.rpartition(")")[2].split()[:2]
        if int(parent) == pid and state != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie, exited but not reaped, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
