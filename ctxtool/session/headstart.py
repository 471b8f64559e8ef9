"""A scan's second process, started before the command line is even parsed.

Owns: forking that process (``start``) while the main one still imports typer and the command (a first run's
start-up: 0.1-0.2 s of one core, the other idle), what it does (discover the files it was told of, then read
them largest first, handing each result back at once) and how the two processes share the files once the
scan begins (``Started``): the main process reads from the small end, this one from the large end, until
they meet. ``scan.read_files`` adopts it only when the files it found are the scan's own, with the same sizes
and modification times (else it is stopped); a file both read is taken once.

Linux only (``os.fork``, ``os.memfd_create``). The results go into an anonymous in-memory file: first the
plan, as JSON, then each file's as MessagePack (data, never code: ``FileColumns``, and the bytes the caller's
``pack`` made of ``then``'s result); a pipe tells the main process when each is whole and which file this
process starts next, and a pipe the other way says how many files the main process has taken.

Must not: print, or import anything above ``ctxtool.session`` (the caller passes ``then``, loaded in the
child)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import struct
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxtool.session.columns import FileColumns
    from ctxtool.session.discover import Discovery, SessionPath

# Messages on the progress pipe: a kind and a file's place in the plan.
_MESSAGE = struct.Struct("<cIQ")  # and, for a record, where it starts in the results file
_STARTED, _DONE = b"S", b"D"
_LENGTH = struct.Struct("<Q")  # before each record in the results file
# On the claims pipe: how many files the main process has taken, in all, and how many records it has read.
_CLAIMS = struct.Struct("<II")
# Each file's place in the files found, size and modification time, in the order they are read.
_Order = list[tuple[int, int, int]]
_PLAN = 0xFFFFFFFF  # the place of the plan's own record
# What the child is given to read with: ``then`` (run on each file read) and ``pack`` (its result as bytes,
# None when it cannot be: the main process then measures that file itself).
Reader = tuple[Callable[["FileColumns"], object], Callable[[object], "bytes | None"]]


class Started:
    """The running second process of a scan, seen from the main one."""

    def __init__(self, pid: int, results: int, progress: int, claims: int) -> None:
        self.pid = pid
        # What turns the bytes ``pack`` made of ``then``'s result back into it (the adopting caller's).
        self.unpack: Callable[[bytes], object] | None = None
        self._results, self._progress, self._claims = results, progress, claims
        self.taken = self.read = 0  # files taken from the small end, records read (what it was last told)
        self._buffer = b""  # progress messages read but not yet whole
        self.started = -1  # the last file of the plan it started
        self.done: list[tuple[int, Any]] = []  # (place, record) read, not yet taken
        self.ended = False  # its progress pipe closed: it is gone, or finished
        self.plan: list[tuple[SessionPath, int, int]] | None = None
        self.asked: tuple[list[str], bool] | None = None  # the targets and ``subagents`` it was given
        self.found: Discovery | None = None
        self._stopped = False

    def read_plan(self) -> list[tuple[SessionPath, int, int]] | None:
        """(where, size, mtime_ns) of the files it found, in the order it reads them (largest first), waited
        for; None when it ended without one."""
        while self.plan is None and not self.ended:
            self.poll(block=True)
        return self.plan

    def discovery(self, targets: Sequence[str], subagents: bool) -> Discovery | None:
        """What it found, when it was asked for ``targets`` (as the caller resolved them) with ``subagents``:
        then the caller need not look again. None otherwise, or when it ended without saying."""
        self.read_plan()
        return self.found if self.asked == ([str(t) for t in targets], subagents) else None

    def claim(self, taken: int) -> None:
        """Tell it that the main process has taken ``taken`` files from the small end, in all."""
        self.taken = taken
        self._say()

    def _say(self) -> None:
        """Tell it what was taken and read: once every record it wrote is read, it writes the next one at the
        start of the results file again, which so holds only what is not read yet."""
        try:
            os.write(self._claims, _CLAIMS.pack(self.taken, self.read))
        except OSError:  # it is gone: what it did not finish, the main process reads
            self.ended = True

    def take_done(self) -> list[tuple[int, Any]]:
        done, self.done = self.done, []
        return done

    def stop(self) -> None:
        """End it at once (it holds nothing that must be flushed), reap it, close the pipes and the file.
        Once: the descriptors may be another file's after."""
        import signal

        if self._stopped:
            return
        self._stopped = self.ended = True
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        for fd in (self._results, self._progress, self._claims):
            with contextlib.suppress(OSError):
                os.close(fd)

    def poll(self, *, block: bool = False) -> None:
        """Take in what it said since (waiting for something when ``block``)."""
        read = self.read
        self._take_in(block=block)
        if self.read != read and not self.ended:
            self._say()

    def _take_in(self, *, block: bool) -> None:
        while not self._stopped:
            ready, _, _ = select.select([self._progress], [], [], None if block else 0)
            if not ready:
                return
            try:
                data = os.read(self._progress, 1 << 16)
            except OSError:
                data = b""
            if not data:
                self.ended = True
                return
            self._buffer += data
            whole = len(self._buffer) - len(self._buffer) % _MESSAGE.size
            for offset in range(0, whole, _MESSAGE.size):
                kind, place, where = _MESSAGE.unpack_from(self._buffer, offset)
                if kind == _STARTED:
                    self.started = place
                    continue
                # A record that does not read back: as if it died there (nothing more taken).
                try:
                    self._read_record(place, where)
                except Exception:
                    self.ended = True
                    return
            self._buffer = self._buffer[whole:]
            block = False  # what came is taken in; more only if it is there already

    def _read_record(self, place: int, where: int) -> None:
        (length,) = _LENGTH.unpack(os.pread(self._results, _LENGTH.size, where))
        data = os.pread(self._results, length, where + _LENGTH.size)
        self.read += 1
        if place == _PLAN:
            self.asked, self.found, order = _from_plan_record(json.loads(data))
            self.plan = [(self.found.files[i], size, mtime_ns) for i, size, mtime_ns in order]
        else:
            fc, extra = _decode_result(data)
            kept = None if extra is None or self.unpack is None else self.unpack(extra)
            self.done.append((place, (fc, kept)))


# What the second process found (``discover``'s ``Discovery``, paths as text) and its plan (places in
# ``files``, largest first, with their size and modification time) cross as one JSON array: plain Python, so
# that the main process imports nothing for it before the fork.
def _plan_record(targets: list[str], subagents: bool, found: Discovery, order: _Order) -> list[Any]:
    return [
        targets,
        subagents,
        [(str(sp.path), sp.project, sp.project_dir, sp.parent_ref, sp.group_key) for sp in found.files],
        [(str(path), why) for path, why in found.skipped],
        list(found.missing),
        [str(d) for d in found.empty_dirs],
        [(str(path), key, message) for path, key, message in found.unreadable],
        order,
    ]


def _from_plan_record(record: list[Any]) -> tuple[tuple[list[str], bool], Discovery, _Order]:
    """(the targets and ``subagents`` it was asked for, the ``Discovery`` it made, its order)."""
    from ctxtool.session.discover import Discovery, SessionPath

    targets, subagents, files, skipped, missing, empty_dirs, unreadable, order = record
    found = Discovery(
        files=[SessionPath(Path(p), project, pdir, ref, key) for p, project, pdir, ref, key in files],
        skipped=[(Path(p), why) for p, why in skipped],
        missing=list(missing),
        empty_dirs=[Path(d) for d in empty_dirs],
        unreadable=[(Path(p), key, message) for p, key, message in unreadable],
    )
    return (targets, subagents), found, order


def available() -> bool:
    """Whether this platform can start one (fork, memfd_create)."""
    return sys.platform.startswith("linux") and hasattr(os, "memfd_create") and hasattr(os, "fork")


def start(targets: Sequence[str], subagents: bool, load: Callable[[], Reader]) -> Started | None:
    """Fork the second process: it discovers ``targets`` (none: the default roots) as ``discover.discover``
    does, and reads the files largest first, each result with ``then(result)`` beside it (``then, pack =
    load()``, in the child). None when it cannot be started."""
    try:
        results = os.memfd_create("ctxtool-headstart", os.MFD_CLOEXEC)
        progress_r, progress_w = os.pipe()
        claims_r, claims_w = os.pipe()
    except OSError:
        return None
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        for fd in (results, progress_r, progress_w, claims_r, claims_w):
            os.close(fd)
        return None
    if pid == 0:  # the second process
        status = 1
        try:
            # Nothing of this process reaches the user's terminal or pipes (a warning, a hook on exit).
            devnull = os.open(os.devnull, os.O_RDWR)
            for stream in (0, 1, 2):
                os.dup2(devnull, stream)
            os.close(progress_r)
            os.close(claims_w)
            _child(list(targets), subagents, load, (results, progress_w, claims_r), parent)
            status = 0
        finally:
            os._exit(status)  # never the main process's exit path (its buffers, its handlers)
    os.close(progress_w)
    os.close(claims_r)
    os.set_blocking(claims_w, False)
    return Started(pid, results, progress_r, claims_w)


def _child(
    targets: list[str], subagents: bool, load: Callable[[], Reader], fds: tuple[int, int, int], parent: int
) -> None:
    results, progress, claims = fds  # the results file, the progress pipe, the claims pipe
    import gc
    import signal

    gc.disable()  # as in a scan's worker (scan._init_worker)
    # Ctrl-C reaches the whole process group: the main process ends this one (ctxtool.common.interrupt).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if os.getppid() != parent:
        return
    # Discovery first, with only its own imports: the main process waits for the plan, not for the rest.
    from ctxtool.session.discover import default_roots, discover, is_dataset, stat_or_none

    if any(is_dataset(os.path.expanduser(t)) for t in targets):
        return  # an export dataset: ``stats`` reads it whole, not through a scan
    targets = targets or [str(root) for root in default_roots()]  # as ``frames.loading.read_plain`` does
    found = discover(targets, subagents=subagents)
    stats = [stat_or_none(sp.path) for sp in found.files]
    order = [(i, st.st_size, st.st_mtime_ns) for i, st in enumerate(stats) if st is not None]
    order.sort(key=lambda entry: -entry[1])  # largest first
    plan = [(found.files[i], size, mtime_ns) for i, size, mtime_ns in order]
    # The plan as JSON: json is loaded already (``ctxtool.frames.replay`` imported it before the fork),
    # msgspec is not, and the main process may be waiting for the plan (importing msgspec took 11-13 ms).
    plan_record = json.dumps(_plan_record(targets, subagents, found, order), separators=(",", ":"))
    end = _write(results, progress, _PLAN, plan_record.encode("ascii"), 0)
    written = 1  # records
    import msgspec

    encode = msgspec.msgpack.Encoder().encode
    from ctxtool.session.columns import extract_file

    then, pack = load()
    os.set_blocking(claims, False)
    said = (0, 0)  # (files taken from the small end, records read) by the main process
    for place, (sp, _, _) in enumerate(plan):
        latest = _claimed(claims, said)
        if latest is None or place >= len(plan) - latest[0]:
            break  # it is gone (its end of the pipe closed), or it has taken the rest
        said = latest
        os.write(progress, _MESSAGE.pack(_STARTED, place, 0))
        fc = extract_file(sp)
        if said[1] == written:
            end = 0  # every record is read: start the file again
        end = _write(results, progress, place, encode((fc, pack(then(fc)))), end)
        written += 1


def _claimed(claims: int, said: tuple[int, int]) -> tuple[int, int] | None:
    """What the main process said last (files taken, records read; ``said`` when nothing new); None when it
    is gone. (Should it die without a word, this process's next message fails: a closed pipe.)"""
    try:
        data = os.read(claims, 1 << 12)
    except BlockingIOError:
        return said
    if not data:
        return None
    whole = len(data) - len(data) % _CLAIMS.size  # (4096 holds whole messages: writes of 8 bytes are atomic)
    return _CLAIMS.unpack_from(data, whole - _CLAIMS.size) if whole else said


def _write(results: int, progress: int, place: int, data: bytes, at: int) -> int:
    """Write the record ``data`` at ``at`` in the results file, then say where it is; returns its end."""
    end = at
    for part in (_LENGTH.pack(len(data)), data):
        view = memoryview(part)
        while view:
            written = os.pwrite(results, view, end)
            view, end = view[written:], end + written
    os.write(progress, _MESSAGE.pack(_DONE, place, at))
    return end


def _decode_result(data: bytes) -> tuple[FileColumns, bytes | None]:
    import msgspec

    from ctxtool.session.columns import FileColumns

    return msgspec.msgpack.decode(data, type=tuple[FileColumns, bytes | None])
