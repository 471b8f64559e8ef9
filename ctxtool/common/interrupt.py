"""Ctrl-C and SIGTERM: one line, a documented exit status, no traceback, no process left, no hang.

Owns: the signal handlers ``ctxtool.__main__`` installs before it imports anything else, the worker
processes' own setting, and ``deferred()``, the sections that must finish once begun (the renames that
complete a write), so an interrupted run leaves the untouched session or the completed one, never a half.

The handler never raises into whatever the interpreter was doing (a lock held inside an import): it SIGKILLs
and reaps the processes this process started, writes "Interrupted." with ``os.write`` and leaves with
``os._exit``; inside a ``deferred()`` section it only notes the signal (an alarm ends the process after
``DEADLINE_S``). Imported first, so it imports only what the interpreter has loaded before ctxtool runs
(``os``, ``sys``, ``time``, the C half of ``signal``), and nothing of ctxtool's.
"""

import _signal  # type: ignore[import-not-found]  # (no stubs) what ``signal`` wraps, without its enums
import os
import sys
import time

TYPE_CHECKING = False  # (not typing's: see above; mypy reads any name TYPE_CHECKING as typing's)
if TYPE_CHECKING:
    from typing import Any

INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
TERMINATED = 143  # 128 + SIGTERM
DEADLINE_S = 2

_main_pid: int | None = None
_deferring = 0
_pending: int | None = None  # the status a signal during a deferred() section ends the run with
_held: object = None  # Python's SIGINT handler, replaced during a deferred() section without ours
_noted = False  # a Ctrl-C came during that section


def install() -> None:
    """Handle SIGINT and SIGTERM in this (the main) process from now on. A worker that a forkserver starts
    runs the console script again (multiprocessing's ``prepare``): there it ignores SIGINT at once."""
    process = sys.modules.get("multiprocessing.process")
    if process is not None and getattr(process.current_process(), "_inheriting", False):
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
        return
    global _main_pid
    _main_pid = os.getpid()
    _signal.signal(_signal.SIGINT, _handle)
    _signal.signal(_signal.SIGTERM, _handle)


def installed() -> bool:
    return _main_pid is not None and _main_pid == os.getpid()


def worker_init(parent: int | None = None) -> None:
    """In a worker process: the main process ends the workers itself, so a worker ignores SIGINT (which
    reaches the whole process group) and dies on SIGTERM. On Linux it also dies when the process that
    started it does, however that one ends: otherwise it would wait on the pool's queue for ever. ``parent``
    is that process's id when known, to catch a parent gone before the request was made."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1  # <linux/prctl.h>
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl in this C library: the main process still ends its workers
        return
    if parent is not None and os.getppid() != parent:
        os._exit(TERMINATED)  # the parent died before the request: no signal will come


class deferred:  # (named as the function it was: ``with interrupt.deferred():``)
    """A section that must complete once begun: a signal during it takes effect when it ends. Without
    ctxtool's handlers (a library use), a Ctrl-C during it raises its KeyboardInterrupt when it ends.

    A class, not a ``contextlib.contextmanager``: this module must not import ``contextlib`` (see above)."""

    def __enter__(self) -> None:
        global _deferring, _held
        _deferring += 1
        if _deferring == 1 and not installed():
            try:
                if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
                    _signal.signal(_signal.SIGINT, _note)
                    _held = _signal.default_int_handler
            except ValueError:  # not the main thread: signals are not this thread's to handle
                pass

    def __exit__(self, *exc: object) -> None:
        global _deferring, _held, _noted
        _deferring -= 1
        if _deferring:
            return
        if _held is not None:
            _signal.signal(_signal.SIGINT, _held)
            _held = None
            if _noted:
                _noted = False
                raise KeyboardInterrupt
        if _pending is not None:
            _leave(_pending)


def _note(signum: int, frame: object) -> None:
    global _noted
    _noted = True


def _handle(signum: int, frame: object) -> None:
    global _pending
    if _main_pid is not None and os.getpid() != _main_pid:
        os._exit(TERMINATED if signum == _signal.SIGTERM else INTERRUPTED)  # a forked child: end quietly
    status = TERMINATED if signum == _signal.SIGTERM else INTERRUPTED
    if _deferring:
        if _pending is None:
            _pending = status
            _signal.signal(_signal.SIGALRM, lambda *_: _leave(status))
            _signal.alarm(DEADLINE_S)
        return
    _leave(status)


def _leave(status: int) -> None:
    _end_children()
    try:  # noqa: SIM105 (no contextlib: the handler imports nothing, the interrupted code may hold an import)
        os.write(2, b"Interrupted.\n")
    except OSError:
        pass
    os._exit(status)


def _end_children() -> None:
    """SIGKILL the processes this process started and wait until each is gone (``DEADLINE_S`` at most), then
    release what multiprocessing's own exit would have: first the workers multiprocessing tracks, then this
    process's other children (the forkserver, the resource tracker, a subprocess)."""
    deadline = time.monotonic() + DEADLINE_S
    for listing in (_workers, _children):
        pids = listing() - {os.getpid()}
        for pid in pids:
            try:  # noqa: SIM105 (as in _leave)
                os.kill(pid, _signal.SIGKILL)
            except OSError:
                pass
        for pid in pids:
            _wait_gone(pid, deadline)
    _release_multiprocessing()


def _workers() -> set[int]:
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return set()
    try:
        return {p.pid for p in mp.active_children() if p.pid is not None}
    except Exception:  # whatever state the interrupted process left it in
        return set()


def _children() -> set[int]:
    """This process's children, from /proc (Linux); elsewhere only the resource tracker, known by its id."""
    me = os.getpid()
    found: set[int] = set()
    tracker = getattr(_multiprocessing_part("resource_tracker", "_resource_tracker"), "_pid", None)
    if isinstance(tracker, int):
        found.add(tracker)
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat.rpartition(b")")[2].split()  # after "pid (comm)": state, ppid, ...
        if len(fields) > 1 and fields[1] == str(me).encode():
            found.add(int(entry))
    return found


def _release_multiprocessing() -> None:
    """Once the children are gone: unlink the named semaphores of this process's pools and remove
    multiprocessing's temporary folder, as a normal exit does and ``os._exit`` skips (the resource tracker
    that would have, with a warning, was killed). Calls the two cleanups directly, not multiprocessing's
    finalizers: those report to the tracker under a lock that the interrupted code may hold."""
    registry = _multiprocessing_part("util", "_finalizer_registry")
    unlink = _multiprocessing_part("synchronize", "sem_unlink")
    semaphore_cleanup = getattr(_multiprocessing_part("synchronize", "SemLock"), "_cleanup", None)
    remove_temp_dir = _multiprocessing_part("util", "_remove_temp_dir")
    try:
        finalizers = list(registry.values()) if registry is not None else []
    except Exception:  # changed under us: nothing to release rather than a traceback
        return
    for finalizer in finalizers:
        callback, args = getattr(finalizer, "_callback", None), getattr(finalizer, "_args", ())
        try:
            if callback is not None and callback is semaphore_cleanup and unlink is not None:
                unlink(*args)
            elif callback is not None and callback is remove_temp_dir:
                callback(*args)
        except Exception:  # already unlinked or removed
            pass


def _multiprocessing_part(module: str, name: str) -> "Any":
    """An attribute of a multiprocessing module this process has loaded (None when not loaded)."""
    return getattr(sys.modules.get(f"multiprocessing.{module}"), name, None)


def _wait_gone(pid: int, deadline: float) -> None:
    """Reap ``pid`` if it is this process's child, else wait until its own parent has."""
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:  # not a child (a forkserver's worker), or reaped by another thread
            try:
                os.kill(pid, 0)
            except OSError:  # gone (or the number is someone else's now)
                return
        except OSError:
            return
        if time.monotonic() >= deadline:
            return
        time.sleep(0.001)


__all__ = ["DEADLINE_S", "INTERRUPTED", "TERMINATED", "deferred", "install", "installed", "worker_init"]
