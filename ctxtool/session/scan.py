"""Read many session files in worker processes and hand back plain columns.

Owns: the process pool and its start method. Workers import only the reader and orjson. Must not import
polars: the CLI starts the pool *before* polars is loaded, so workers can be forked cheaply and the parent
can load polars and the price data while they parse (see ``read_files(..., while_waiting=...)``)."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from ctxtool.session.columns import FileColumns, extract_file
from ctxtool.session.discover import SessionPath, stat_or_none

if TYPE_CHECKING:
    import multiprocessing.context
    from concurrent.futures import Future, ProcessPoolExecutor

    from ctxtool.session.headstart import Started
    from ctxtool.session.index import FileIndex

Progress = Callable[[int, int], None]
_T = TypeVar("_T")


class Errand(msgspec.Struct):
    """Work a lone worker can do beside the files, so that this process need not hold what it loads.

    With one worker, ``start()`` runs in it before its first file and ``finish(finish_arg())`` after the last,
    into ``result``. ``taken`` is set (before ``while_waiting``) when the worker will do it; otherwise, or
    when ``result`` stays None (it failed), the caller does it. Picklable, and never importing polars."""

    start: Callable[[], object]
    finish: Callable[[Any], object]
    finish_arg: Callable[[list[object]], Any]  # of what ``then`` made of each file read
    # Its start alone costs more than starting a worker does: a scan too small for workers starts one for it.
    repays_a_worker: bool = False
    taken: bool = False
    result: object = None


# Below this many bytes, worker processes cost more than they save (2 cores, `stats`: 25 MB took 0.285 s of
# CPU alone against 0.35 s with a worker in about the same wall time; 50 MB 0.48 s against 0.44 s of wall
# time). Without a memo of the day's prices the worker pays at any size (``Errand.repays_a_worker``).
PARALLEL_MIN_BYTES = 40 * 1024 * 1024
# A batch holds at most this many files: the parent decodes each batch's rows when it returns, the last on the
# critical path. (With 128 rather than 64, the median cold run on the bench corpus was 8-21 ms quicker.)
_BATCH_FILES = 128
# The smallest batch, as a share of the whole scan's bytes per process: 1/64 of each process's share.
_FLOOR_SHARE = 64
# The size ``_widen`` asks for: the largest pipe a process may have without privileges on Linux
# (``/proc/sys/fs/pipe-max-size``, 1 MiB by default).
_PIPE_BYTES = 1 << 20
# How often a scan waiting for its workers checks that one is still alive (``_Pooled._next_finished``).
_LIVENESS_S = 2.0
# A batch ``_read_beside`` hands to ``_Scan.take``: at least this share of the scan's bytes (or
# ``_BATCH_FILES`` files), as the pool's are about (``_Carver``).
_BESIDE_SHARE = 64


def read_files(
    files: Sequence[SessionPath],
    *,
    progress: Progress | None = None,
    workers: int | None = None,
    while_waiting: Callable[[], object] | None = None,
    index: FileIndex | None = None,
    arrived: Callable[[list[FileColumns]], object] | None = None,
    errand: Errand | None = None,
    then: Callable[[FileColumns], object] | None = None,
    kept: dict[str, object] | None = None,
    stamped: dict[str, list[int] | None] | None = None,
    started: Started | None = None,
) -> list[FileColumns]:
    """Flatten every file, in input order. ``while_waiting`` runs in this process while workers parse.

    With work enough for ``workers`` processes (default: a core each), this process is one of them and
    parses the smallest batches itself (on 2 cores, 35 MB less peak memory on the bench corpus). With an
    ``index``, unchanged files come from it, grown JSONL files are read from where they ended, and it is
    saved before returning. ``arrived`` is given each batch of results as they come (after ``while_waiting``)
    and may consume their rows: the index has its copy. ``then`` (picklable) runs on each file read in the
    process that read it; what it returns goes into ``kept`` by path, except None. ``stamped`` is given each
    file's size and modification time before reading (as ``discover.file_stamps``).

    ``started`` (``ctxtool.session.headstart``) is adopted in place of the pool when it found exactly these
    files, as they are now, reads with the same ``then`` (the caller's word), and the pool would not have
    more processes; else it is stopped first. Either way it is gone on return."""
    scan = _Scan(files, index, progress, arrived, then)
    if stamped is not None:
        stamped.update(
            (str(sp.path), None if st is None else [st.st_size, st.st_mtime_ns])
            for sp, st in zip(files, scan.stats, strict=True)
        )
    n_workers = _worker_count(scan.cost, workers, errand)
    collecting = gc.isenabled()
    gc.disable()  # see _init_worker
    try:
        # (Two processes, this one and it: not where the pool would have more.)
        order = _adopted(scan, started) if started is not None and n_workers <= 2 else None
        if order is None and started is not None:
            started.stop()  # before the pool starts: its core is the pool's
        if order is None and n_workers > 1:
            _read_in_pool(scan, n_workers, while_waiting, errand)
        else:
            if while_waiting:
                while_waiting()
            if order is None or started is None:
                scan.read_each()
            else:
                _read_beside(scan, started, order)
    finally:
        if started is not None:
            started.stop()
        if collecting:
            gc.enable()
    out = [r for r in scan.results if r is not None]
    if index is not None:
        scan.save(index)
    if kept is not None:
        kept.update((str(files[i].path), x) for i, x in enumerate(scan.extras) if x is not None)
    return out


class _Scan:
    """One ``read_files`` call: what is known of each file (by its position in ``files``), the files still
    to read (``todo``, with what reading each costs) and the results as they come.

    (Plain classes, here and in ``_Pooled``: as dataclasses the two added 6.8 million instructions to
    importing this module, which every run of the CLI does.)"""

    def __init__(
        self,
        files: Sequence[SessionPath],
        index: FileIndex | None,
        progress: Progress | None,
        arrived: Callable[[list[FileColumns]], object] | None,
        then: Callable[[FileColumns], object] | None = None,
    ) -> None:
        """Stat the files and, with an ``index``, take the results it holds (then close it: see below)."""
        self.files, self.index, self.progress, self.arrived, self.then = files, index, progress, arrived, then
        self.extras: list[object] = [None] * len(files)  # what ``then`` made of each file read
        self.stats = [stat_or_none(sp.path) for sp in files]
        self.sizes = sizes = [st.st_size if st is not None else 0 for st in self.stats]
        self.total = sum(sizes)
        self.results: list[FileColumns | None] = [None] * len(files)
        self.resume: list[FileColumns | None] = [None] * len(files)  # earlier results of grown files
        self.todo: list[int] = []
        self.cost: dict[int, int] = {}  # of each file in ``todo``: its bytes still to read
        self.done = 0  # bytes read or served from the index
        self.stored_early: set[int] = set()  # results stored in the index as they arrived
        for i, sp in enumerate(files):
            st = self.stats[i]
            earlier = None
            if index is not None and st is not None:
                hit, earlier = index.lookup(sp, st)
                if hit is not None:
                    self.results[i] = hit
                    index.hits += 1
                    self.done += sizes[i]
                    continue
                self.resume[i] = earlier
            self.todo.append(i)
            # Work still to do: resumed files cost only their new bytes.
            self.cost[i] = sizes[i] - (earlier.size if earlier is not None else 0)
        if index is not None:
            index.close()  # a database connection must not be shared with forked workers

    def jobs(self, batch: list[int]) -> list[tuple[SessionPath, FileColumns | None]]:
        return [(self.files[i], self.resume[i]) for i in batch]

    def read(self, batch: list[int]) -> list[tuple[FileColumns, object]]:
        return _extract(self.jobs(batch), self.then)

    def read_each(self) -> None:
        """Read every file to do in this process, reporting progress after each."""
        for i in self.todo:
            ((self.results[i], self.extras[i]),) = _extract(self.jobs([i]), self.then)
            self.done += self.sizes[i]
            if self.progress:
                self.progress(self.done, self.total)

    def take(self, batch: list[int], read: list[tuple[FileColumns, object]]) -> None:
        """A batch read (by a worker or here): its results are stored, then handed to ``arrived``."""
        index = self.index
        batch_results = [fc for fc, _ in read]
        for i, (fc, extra) in zip(batch, read, strict=True):
            self.results[i], self.extras[i] = fc, extra
            self.done += self.sizes[i]
            if index is not None:
                index.store(fc, self.stats[i])  # before ``arrived`` consumes the rows
                self.stored_early.add(i)
        if index is not None:
            index.flush()  # written while the workers still parse; not held until the end
        if self.arrived is not None:
            self.arrived(batch_results)
        if self.progress:
            self.progress(self.done, self.total)

    def save(self, index: FileIndex) -> None:
        """Store the results not stored as they arrived, count them, save the index and close it."""
        for i in self.todo:
            stored = self.results[i]
            if stored is not None:
                if i not in self.stored_early:
                    index.store(stored, self.stats[i])
                index.resumed += stored.resumed
                index.parsed += not stored.resumed
        index.save()
        index.close()


def _adopted(scan: _Scan, started: Started) -> list[int] | None:
    """The files of ``scan`` in the order ``started`` reads them, when it found exactly the files the scan
    reads (none served by the index or resumed), each described alike and of the stamp the scan saw."""
    plan = started.read_plan()
    resumed = any(earlier is not None for earlier in scan.resume)
    if plan is None or resumed or len(plan) != len(scan.todo) or len(scan.todo) != len(scan.files):
        return None
    where = {str(sp.path): i for i, sp in enumerate(scan.files)}
    order = []
    for sp, size, mtime_ns in plan:
        i = where.pop(str(sp.path), None)
        st = scan.stats[i] if i is not None else None
        if i is None or st is None or (st.st_size, st.st_mtime_ns) != (size, mtime_ns) or sp != scan.files[i]:
            return None
        order.append(i)
    return order


def _read_beside(scan: _Scan, started: Started, order: list[int]) -> None:
    """Read the files of ``order`` with ``started``, which reads from its start (the largest) while this
    process reads from its end, until they meet; each file is taken once. Results go to ``scan.take`` in
    batches (the index commits one transaction per batch)."""
    n = len(order)
    got: set[int] = set()  # places in ``order`` whose result is taken, or pending
    pending: list[tuple[int, tuple[FileColumns, object]]] = []
    weight = 0
    target = max(1, scan.total // _BESIDE_SHARE)

    def keep(place: int, result: tuple[FileColumns, object]) -> None:
        nonlocal weight
        if place in got:
            return
        got.add(place)
        pending.append((order[place], result))
        weight += scan.sizes[order[place]]

    def hand_over(*, all_of_it: bool = False) -> None:
        nonlocal weight
        if pending and (all_of_it or weight >= target or len(pending) >= _BATCH_FILES):
            scan.take([i for i, _ in pending], [result for _, result in pending])
            pending.clear()
            weight = 0

    def absorb(*, block: bool = False) -> None:
        started.poll(block=block)
        for place, result in started.take_done():
            keep(place, result)
        hand_over()

    low = n  # this process has taken the places from ``low`` on
    while True:
        absorb()
        if low == 0 or low - 1 <= started.started or low - 1 in got or started.ended:
            break
        low -= 1
        started.claim(n - low)
        keep(low, scan.read([order[low]])[0])
    while not started.ended and len(got) < n:  # (``got`` holds every place from ``low`` on)
        absorb(block=True)  # its last files; the pipe closes if it dies
    for place in range(low):  # what it left (it died): read here
        if place not in got:
            keep(place, scan.read([order[place]])[0])
            hand_over()
    hand_over(all_of_it=True)


def _worker_count(cost: dict[int, int], workers: int | None, errand: Errand | None) -> int:
    """How many processes read the files, this one included (1: no pool)."""
    cores = workers if workers is not None else (os.cpu_count() or 1)
    if sum(cost.values()) >= PARALLEL_MIN_BYTES:
        return min(cores, len(cost))
    # Too little to read for workers to repay their start, unless the errand alone does (a worker forked,
    # not started afresh: the forkserver's start costs about what the errand saves).
    cheap = sys.platform == "linux" and "polars" not in sys.modules
    errand_pays = errand is not None and errand.repays_a_worker and cheap
    return min(cores, 2) if cost and errand_pays else 1


def _read_in_pool(
    scan: _Scan, n_workers: int, while_waiting: Callable[[], object] | None, errand: Errand | None
) -> None:
    """Read ``scan.todo`` with ``n_workers - 1`` worker processes and this one; whatever ends the scan,
    no worker outlives it."""
    # The pool's modules are imported here: a run that reads a few files (a grown session) skips them.
    from concurrent.futures import ProcessPoolExecutor

    # Batches of files (a task per file costs more in the pool's bookkeeping than small files take to
    # parse), largest first, shrinking so that no worker is left alone at the end.
    carver = _Carver(scan.todo, scan.cost, n_workers)
    context = _mp_context()
    # A forkserver's workers are its children, not this process's (see interrupt.worker_init).
    parent = None if context.get_start_method() == "forkserver" else os.getpid()
    pool = ProcessPoolExecutor(
        max_workers=n_workers - 1, mp_context=context, initializer=_init_worker, initargs=(parent,)
    )
    _widen(pool)
    lone = errand if n_workers == 2 else None  # the errand, when one worker will do it
    if lone is not None:
        lone.taken = True
    run = _Pooled(scan, pool, 2 * (n_workers - 1), carver)
    try:
        if lone is not None:
            run.submit(lone.start)  # the worker's first task, ahead of every file
        run.feed()
        if while_waiting:
            while_waiting()
        run.drain()
        if lone is not None and not run.broken:
            run.finish(lone)
        pool.shutdown()
    except KeyboardInterrupt:
        # Ctrl-C without ctxtool's signal handlers (the console script installs them; see
        # ctxtool.common.interrupt): the workers are killed and joined before the interrupt goes on.
        _kill_pool(pool)
        raise
    except BaseException:
        # An error (a worker's included): queued batches are dropped, running ones end, workers joined.
        pool.shutdown(wait=True, cancel_futures=True)
        raise


class _Pooled:
    """The pool's part of a scan: the batches not sent yet, those out (``slots`` at most) and whether a
    worker died (then this process reads the rest)."""

    def __init__(self, scan: _Scan, pool: ProcessPoolExecutor, slots: int, queue: _Carver) -> None:
        self.scan, self.pool, self.slots, self.queue = scan, pool, slots, queue
        self.futures: dict[Future[list[tuple[FileColumns, object]]], list[int]] = {}
        self.broken = False

    def submit(self, fn: Callable[..., _T], *args: Any) -> Future[_T]:
        from ctxtool.common import interrupt

        # The pool starts its workers inside submit(); a signal meanwhile waits until each is recorded
        # as this process's worker, so the handler finds and ends every one (interrupt.deferred).
        with interrupt.deferred():
            return self.pool.submit(fn, *args)

    def feed(self) -> None:
        from concurrent.futures.process import BrokenProcessPool

        while self.queue and not self.broken and len(self.futures) < self.slots:
            batch = self.queue.cut(costly=True)
            try:
                self.futures[self.submit(_extract_batch, self.scan.jobs(batch), self.scan.then)] = batch
            except BrokenProcessPool:  # a worker died since the last batch came back
                self.queue.put_back(batch)
                self.broken = True

    def drain(self) -> None:
        """Take the workers' batches as they return, and read the smallest batch here while none has."""
        from concurrent.futures.process import BrokenProcessPool

        scan, queue, futures = self.scan, self.queue, self.futures
        while futures or queue:
            finished = [f for f in futures if f.done()]
            if not finished and queue:
                # This process parses too: the smallest batch, between the workers' returns.
                batch = queue.cut(costly=False)
                scan.take(batch, scan.read(batch))
                continue
            if not finished:
                finished = self._next_finished()
            for fut in finished:
                batch = futures.pop(fut)
                try:
                    batch_results = fut.result()
                except BrokenProcessPool:
                    # A worker died (killed for memory, say): read what is left here, one file at a
                    # time, where a file too large to read becomes a one-line error, not a lost batch.
                    self.broken = True
                    batch_results = scan.read(batch)
                scan.take(batch, batch_results)
            self.feed()

    def _next_finished(self) -> list[Future[list[tuple[FileColumns, object]]]]:
        """The batches that come back next. Every few seconds while none does, once no worker is alive, the
        pool's reader is given an end of file (``_unblock``): a worker killed while sending its results then
        breaks the pool instead of leaving it waiting."""
        from concurrent.futures import FIRST_COMPLETED, wait

        while True:
            done, _ = wait(self.futures, timeout=_LIVENESS_S, return_when=FIRST_COMPLETED)
            if done:
                return list(done)
            if not any(p.is_alive() for p in list((self.pool._processes or {}).values())):
                _unblock(self.pool)

    def finish(self, lone: Errand) -> None:
        """The errand's end, in the worker that started it, once every file is read."""
        try:
            lone.result = self.submit(lone.finish, lone.finish_arg(self.scan.extras)).result()
        except Exception:  # any failure: the caller does the work itself, and reports what fails
            lone.result = None


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers and wait for each, also where a KeyboardInterrupt inside the pool's own code
    left it in a state its ``shutdown`` fails in."""
    processes = list((pool._processes or {}).values())
    for process in processes:
        process.kill()
    for process in processes:
        process.join()
    _unblock(pool)  # one may have been killed in the middle of sending (1 run in 80 hung so on Ctrl-C)
    with contextlib.suppress(RuntimeError):  # "cannot join thread before it is started"
        pool.shutdown(wait=True, cancel_futures=True)


def _init_worker(parent: int | None) -> None:
    """A worker's start (``interrupt.worker_init``), without the cyclic garbage collector.

    A scan makes many short-lived objects and no cycles among them, so the collector only costs time (on the
    bench corpus 0.06 s in the parent, 0.03 s in the worker). ``read_files`` turns it off in this process
    too (a forked worker inherits that; one started afresh does not)."""
    from ctxtool.common import interrupt

    gc.disable()
    interrupt.worker_init(parent)


def _widen(pool: ProcessPoolExecutor) -> None:
    """Widen the pipe the workers send their results on, from 64 KiB to 1 MiB (Linux; elsewhere, or when
    refused, it stays as it is).

    A batch's result is a few hundred KiB to 2 MiB. The pool's reader thread takes it in pipe-sized reads,
    each needing the interpreter lock this process, parsing too, hands over only every few milliseconds;
    meanwhile the worker waits instead of parsing. On the bench corpus its waits summed to 0.135-0.153 s,
    0.060-0.067 s with the wider pipe."""
    if not sys.platform.startswith("linux"):
        return  # (no fcntl module on Windows; no F_SETPIPE_SZ on macOS)
    import fcntl

    with contextlib.suppress(AttributeError, OSError):  # (AttributeError: no F_SETPIPE_SZ in this build)
        fcntl.fcntl(pool._result_queue._reader.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)  # type: ignore[attr-defined]


def _unblock(pool: ProcessPoolExecutor) -> None:
    """Once no worker is left: close this process's end of the pipe the workers send results on. A worker
    that died while sending leaves the pool's reader waiting for the rest for ever, as this process holds
    that end too; closed, the reader gets an end of file and the pool ends as broken."""
    with contextlib.suppress(AttributeError, OSError):
        pool._result_queue._writer.close()  # type: ignore[attr-defined]


def _extract_batch(
    batch: list[tuple[SessionPath, FileColumns | None]], then: Callable[[FileColumns], object] | None
) -> list[tuple[FileColumns, object]]:
    """A worker's task."""
    return _extract(batch, then)


def _extract(
    batch: list[tuple[SessionPath, FileColumns | None]], then: Callable[[FileColumns], object] | None
) -> list[tuple[FileColumns, object]]:
    files = [extract_file(sp, earlier) for sp, earlier in batch]
    return [(fc, None if then is None else then(fc)) for fc in files]


class _Carver:
    """The files still to read, costliest first, from which each batch is cut when it is handed out: the
    workers take theirs from the costly end, this process from the cheap end.

    A batch is a quarter of what is left per process when it is cut, down to a floor (``_FLOOR_SHARE``), so
    batches shrink as the two ends meet and what a worker still holds at the end is small. (Cut all at once
    up front, this process waited up to 0.2 s for the lone worker's last batch; now 0.014-0.018 s.)"""

    def __init__(self, todo: list[int], cost: dict[int, int], workers: int) -> None:
        self.order = deque(sorted(todo, key=lambda i: -cost[i]))
        self.cost, self.workers = cost, workers
        self.left = sum(cost[i] for i in todo)
        self.floor = max(1, self.left // (workers * _FLOOR_SHARE))

    def __bool__(self) -> bool:
        return bool(self.order)

    def cut(self, *, costly: bool) -> list[int]:
        """The next batch from the costly end (``costly``) or the cheap one."""
        order, cost = self.order, self.cost
        take = order.popleft if costly else order.pop
        target = max(self.floor, self.left // (self.workers * 4))
        batch: list[int] = []
        weight = 0
        while order and weight < target and len(batch) < _BATCH_FILES:
            i = take()
            batch.append(i)
            weight += cost[i]
        self.left -= weight
        return batch

    def put_back(self, batch: list[int]) -> None:
        """A batch cut from the costly end that could not be handed out."""
        self.order.extendleft(reversed(batch))
        self.left += sum(self.cost[i] for i in batch)


def _mp_context() -> multiprocessing.context.BaseContext:
    """fork while this process has no native thread pools (polars not loaded yet), else forkserver.

    Forking a process whose polars thread pool is running can deadlock the child; the forkserver starts
    clean workers (which re-import the main module: scripts need the ``__main__`` guard)."""
    import multiprocessing

    if sys.platform == "linux" and "polars" not in sys.modules:
        return multiprocessing.get_context("fork")
    if sys.platform == "linux":
        import signal
        from multiprocessing import forkserver, resource_tracker

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["ctxtool.session.columns"])
        # Until their initializer ignores it, the server's workers have Python's SIGINT handler: Ctrl-C at
        # the terminal would print a worker's traceback. A server started with SIGINT blocked passes the mask
        # on to every worker it forks. (The resource tracker first: starting it unblocks SIGINT.)
        resource_tracker.ensure_running()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            forkserver.ensure_running()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return ctx
    return multiprocessing.get_context("spawn")
