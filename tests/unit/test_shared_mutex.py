"""The workers' shared mutex: one holder across processes, a bounded wait, and a holder that
dies gives it up (storage/shared_mutex.py)."""

from __future__ import annotations

import os
import time

from titen.storage.shared_mutex import SharedMutex


def in_child(mutex: SharedMutex, then: str) -> tuple[int, int]:
    """Fork a child that takes `mutex`, then either exits holding it ("die") or holds it until
    told to let go ("hold": a byte written to the returned pipe); returns its pid and that pipe
    once it has the mutex."""
    ready_in, ready_out = os.pipe()
    go_in, go_out = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery from here on
        try:
            mutex.acquire(5)
            os.write(ready_out, b"!")
            if then == "hold":
                os.read(go_in, 1)
        finally:
            os._exit(0)
    os.close(ready_out)
    os.close(go_in)
    assert os.read(ready_in, 1) == b"!"
    os.close(ready_in)
    return pid, go_out


def test_one_holder_at_a_time_across_processes_and_the_wait_is_bounded():
    mutex = SharedMutex()
    pid, let_go = in_child(mutex, "hold")
    started = time.monotonic()
    assert not mutex.acquire(0)
    assert not mutex.acquire(0.2)
    assert 0.15 <= time.monotonic() - started < 0.9
    os.write(let_go, b"!")
    os.close(let_go)
    assert mutex.acquire(5)  # once the child has let go
    mutex.release()
    os.waitpid(pid, 0)


def test_a_holder_that_dies_gives_it_up():
    mutex = SharedMutex()
    pid, let_go = in_child(mutex, "die")
    os.close(let_go)
    os.waitpid(pid, 0)
    assert mutex.acquire(1)  # the kernel hands it on, marked: made consistent and taken
    mutex.release()
    assert mutex.acquire(0)
    mutex.release()
