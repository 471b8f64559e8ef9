"""Ctrl-C and SIGTERM: one line, a documented exit status, no traceback, no process left, no hang.

Owns: the signal handlers the console entry point installs before it imports anything else
(``ctxtool.__main__``), the worker processes' own setting, and ``deferred()``, the sections that must finish
once begun (the renames that complete a write), so that an interrupted run leaves either the untouched
session or the completed one with its backup, never a half.

How it stays free of hangs by construction: the handler does not raise into whatever the interpreter was
doing (a lock held inside an import, a pool's result pipe half read); it writes "Interrupted." with
``os.write``, kills the worker processes this process started (SIGKILL: they hold nothing that must be
flushed) and leaves with ``os._exit``. Inside a ``deferred()`` section it only notes the signal; the section
ends in microseconds (a rename or two), and an alarm ends the process after ``DEADLINE_S`` if it does not.

Imports only the standard library; must not import anything of ctxtool's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType

INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
TERMINATED = 143  # 128 + SIGTERM
DEADLINE_S = 2

_main_pid: int | None = None
_deferring = 0
_pending: int | None = None


def install() -> None:
    """Handle SIGINT and SIGTERM in this (the main) process from now on."""
    global _main_pid
    _main_pid = os.getpid()
    signal.signal(signal.SIGINT, _handle)
    signal.signal(signal.SIGTERM, _handle)


def installed() -> bool:
    return _main_pid is not None and _main_pid == os.getpid()


def worker_init() -> None:
    """In a worker process: Ctrl-C at the terminal reaches the whole process group, and the main process
    ends the workers itself, so a worker ignores SIGINT (no second message, no traceback) and dies on
    SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A section that must complete once begun: a signal during it takes effect when it ends."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if _deferring == 0 and _pending is not None:
            _leave(_pending)


def _handle(signum: int, frame: FrameType | None) -> None:
    global _pending
    if _main_pid is not None and os.getpid() != _main_pid:
        os._exit(TERMINATED if signum == signal.SIGTERM else INTERRUPTED)  # a forked child: end quietly
    status = TERMINATED if signum == signal.SIGTERM else INTERRUPTED
    if _deferring:
        if _pending is None:
            _pending = status
            signal.signal(signal.SIGALRM, lambda *_: _leave(status))
            signal.alarm(DEADLINE_S)
        return
    _leave(status)


def _leave(status: int) -> None:
    _kill_workers()
    with contextlib.suppress(OSError):
        os.write(2, b"Interrupted.\n")
    os._exit(status)


def _kill_workers() -> None:
    """SIGKILL every worker process this process started (multiprocessing tracks them, whichever start
    method made them)."""
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return
    with contextlib.suppress(Exception):
        for child in mp.active_children():
            if child.pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(child.pid, signal.SIGKILL)


__all__ = ["DEADLINE_S", "INTERRUPTED", "TERMINATED", "deferred", "install", "installed", "worker_init"]
