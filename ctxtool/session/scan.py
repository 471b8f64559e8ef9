"""Read many session files in worker processes and hand back plain columns.

Owns: the process pool and its start method. Workers import only the reader and orjson. Must not import
polars: the CLI starts the pool *before* polars is loaded, so workers can be forked cheaply and the parent
can load polars and the price data while they parse (see ``read_files(..., while_waiting=...)``).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from ctxtool.session.columns import FileColumns, extract_file
from ctxtool.session.discover import SessionPath

Progress = Callable[[int, int], None]

# Below this many bytes, worker processes cost more than they save.
PARALLEL_MIN_BYTES = 16 * 1024 * 1024


def read_files(
    files: Sequence[SessionPath],
    *,
    progress: Progress | None = None,
    workers: int | None = None,
    while_waiting: Callable[[], object] | None = None,
) -> list[FileColumns]:
    """Flatten every file, in input order. ``while_waiting`` runs in this process while workers parse."""
    sizes = []
    for sp in files:
        try:
            sizes.append(sp.path.stat().st_size)
        except OSError:
            sizes.append(0)
    total = sum(sizes)
    n_workers = min(workers if workers is not None else (os.cpu_count() or 1), len(files))
    done = 0
    if n_workers <= 1 or total < PARALLEL_MIN_BYTES:
        if while_waiting:
            while_waiting()
        out = []
        for sp, size in zip(files, sizes, strict=True):
            out.append(extract_file(sp))
            done += size
            if progress:
                progress(done, total)
        return out
    # Largest files first so no worker is left alone with a giant file at the end.
    order = sorted(range(len(files)), key=lambda i: -sizes[i])
    results: list[FileColumns | None] = [None] * len(files)
    with ProcessPoolExecutor(max_workers=n_workers, mp_context=_mp_context()) as pool:
        futures = {pool.submit(extract_file, files[i]): i for i in order}
        if while_waiting:
            while_waiting()
        for fut in as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()
            done += sizes[i]
            if progress:
                progress(done, total)
    return [r for r in results if r is not None]


def _mp_context() -> multiprocessing.context.BaseContext:
    """fork while this process has no native thread pools (polars not loaded yet), else forkserver.

    Forking a process whose polars thread pool is running can deadlock the child; the forkserver starts
    clean workers (which re-import the main module, so scripts need the ``if __name__ == "__main__"`` guard,
    as multiprocessing always requires outside fork).
    """
    if sys.platform == "linux" and "polars" not in sys.modules:
        return multiprocessing.get_context("fork")
    if sys.platform == "linux":
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["ctxtool.session.columns"])
        return ctx
    return multiprocessing.get_context("spawn")
