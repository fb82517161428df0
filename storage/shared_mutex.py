"""A mutex the forked processes of one server share: one holder at a time, given up when its
holder dies, and waited for with a bound.

The workers of `titen serve --workers N` take turns at two things through it: saving (the
group-commit leaders, storage/group_commit.py) and deciding which of them accepts connections
(api/rest/balance.py). What the standard library offers falls short of one of the three:
`multiprocessing.Lock` is never given up by a process that dies holding it (a killed worker
would stop every other), and a file lock (`fcntl.flock`) cannot be waited for with a bound.
A POSIX robust, process-shared mutex does all three: the kernel hands it to the next waiter,
marked, when its owner dies, and `pthread_mutex_timedlock` gives up at a deadline. It lives in
anonymous shared memory mapped before the workers are forked (Linux and glibc; the calls go
through ctypes, which releases the interpreter lock while one waits).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import time

_MUTEX_BYTES = 64
"""Room for a `pthread_mutex_t` (40 bytes on x86-64 glibc, 48 on arm64)."""
_ATTR_BYTES = 16
"""Room for a `pthread_mutexattr_t` (4 bytes on x86-64 glibc, 8 on arm64)."""
_PTHREAD_PROCESS_SHARED = 1
_PTHREAD_MUTEX_ROBUST = 1
_libc = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class SharedMutex:
    """A robust mutex in shared memory: make it before forking, use it in any child.

    Held by a thread, not a process: the thread that acquires it releases it.
    """

    def __init__(self) -> None:
        self._memory = mmap.mmap(-1, _MUTEX_BYTES)  # shared and anonymous: forks see one
        self._mutex = ctypes.addressof(ctypes.c_char.from_buffer(self._memory))
        attr = ctypes.create_string_buffer(_ATTR_BYTES)
        _check(_libc.pthread_mutexattr_init(attr))
        try:
            _check(_libc.pthread_mutexattr_setpshared(attr, _PTHREAD_PROCESS_SHARED))
            _check(_libc.pthread_mutexattr_setrobust(attr, _PTHREAD_MUTEX_ROBUST))
            _check(_libc.pthread_mutex_init(ctypes.c_void_p(self._mutex), attr))
        finally:
            _libc.pthread_mutexattr_destroy(attr)

    def acquire(self, timeout: float) -> bool:
        """Take the mutex within `timeout` seconds (0: only if free now); whether it was taken.

        A holder that died leaves it taken for the next one, which finds what it guarded as the
        dead holder left it: both uses here guard only a turn, never data left half-written.
        """
        mutex = ctypes.c_void_p(self._mutex)
        if timeout <= 0:
            rc = _libc.pthread_mutex_trylock(mutex)
        else:
            deadline = time.time() + timeout  # timedlock's deadline is on CLOCK_REALTIME
            at = _Timespec(int(deadline), int(deadline % 1 * 1e9))
            rc = _libc.pthread_mutex_timedlock(mutex, ctypes.byref(at))
        if rc == errno.EOWNERDEAD:
            _check(_libc.pthread_mutex_consistent(mutex))
            return True
        if rc in (errno.EBUSY, errno.ETIMEDOUT):
            return False
        _check(rc)
        return True

    def release(self) -> None:
        _check(_libc.pthread_mutex_unlock(ctypes.c_void_p(self._mutex)))


def _check(rc: int) -> None:
    if rc != 0:
        raise OSError(rc, os.strerror(rc))
