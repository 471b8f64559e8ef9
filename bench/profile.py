"""Where a first run's time goes: each stage of `ctxtool stats` on the bench corpus, timed on its own.

``python bench/profile.py [CORPUS]`` (also run by ``make bench``; the corpus defaults to the one
``bench/make_corpus.py`` builds). It prints, for each stage, the CPU seconds it costs on one core and which
process pays it:

* start-up: ``ctxtool stats --help`` and the imports a run needs before it starts the workers;
* per file, in the workers and the parent (which parses beside them): reading the bytes, the UTF-8 check,
  the msgspec decode of the records (the reader's own decoders, nothing else), and the rest of the per-file
  work (the replay of Gemini CLI's rules, the report rows and their estimates, encoding the columns); sending
  the results back (pickle, both ways); starting the worker processes;
* counting and pricing each file's session where it was read (``frames.tally.count_and_price``: the
  workers' share too) and the report made of the counts in the parent (``frames.tally``);
* in the parent: the price rates (a new user's come from the rates shipped in the package; beside them, what
  loading genai-prices' data costs when they cannot answer), writing the index; and, shown but not summed,
  what a first ``stats --by session`` no longer pays but other reports and commands do: importing polars,
  building the corpus of frames from the engine's columns;
* whether the workers pay: the wall time of a ``--no-cache`` load of the first 4 to 64 MB of the corpus (as
  much as it holds) in one process and with all cores (the parent parsing beside a worker per other core),
  each in a new process (``ctxtool.session.scan.PARALLEL_MIN_BYTES``: where a scan starts workers);
* the real runs for comparison: ``stats --no-cache`` and a first run, wall time and the CPU of every process.

Stages are timed one after another in this process, each the best of ``--repeat`` (CPU time, so that another
process on the machine matters less), with the files in the page cache. Their sum is not a run's wall time: a
run overlaps the parent's stages with the workers'. It tells what to make cheaper first.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_corpus  # a sibling script, not a package

REPO = Path(__file__).resolve().parents[1]
IF_ASKED = "if asked"  # a stage a new user's first `stats` does not pay (not summed)


def cpu_best(repeat: int, work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def child_run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and all its processes)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _nothing(_: int) -> None:
    return None


def pool_start_cpu(repeat: int) -> float:
    """CPU of starting the workers as ``ctxtool.session.scan`` does (fork, one per core but the parent's)
    and running one empty task in each: this process's CPU plus the workers'."""
    from concurrent.futures import ProcessPoolExecutor

    from ctxtool.session.scan import _mp_context

    best = float("inf")
    workers = max(1, (os.cpu_count() or 1) - 1)
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.process_time()
        with ProcessPoolExecutor(max_workers=workers, mp_context=_mp_context()) as pool:
            list(pool.map(_nothing, range(workers)))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        children = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best = min(best, time.process_time() - start + children)
    return best


_CROSSOVER_CHILD = """
import json, sys, time
from ctxtool.session import scan
paths, workers = json.loads(sys.argv[1]), int(sys.argv[2])
scan.PARALLEL_MIN_BYTES = 0 if workers > 1 else 1 << 50

if __name__ == "__main__":
    from ctxtool.stats import StatsQuery, read_report
    start = time.perf_counter()
    # a --no-cache `stats --by session`: reading, counting each file where it is read, the report
    read_report(paths, StatsQuery(by="session"), cache=False, cache_dir=None, progress=None, warn=print)
    print(time.perf_counter() - start)
"""


def crossover(files: list[Any], repeat: int) -> list[str]:
    """For ``PARALLEL_MIN_BYTES`` (below it a scan stays in one process): the wall time of a ``--no-cache``
    ``stats --by session`` report of the first N megabytes of the corpus (reading, counting, the report) in
    one process and with all cores, each in a new process as a run does it. The price rates come without
    genai-prices' data (the rates shipped in the package, else the day's memo: the runs share a cache
    folder)."""
    from ctxtool.session import scan

    threshold = scan.PARALLEL_MIN_BYTES / 2**20
    lines = [f"workers or not (scan.PARALLEL_MIN_BYTES = {threshold:.0f} MB): wall s, best of {repeat}"]
    cores = os.cpu_count() or 1
    cache = tempfile.mkdtemp(prefix="profile-crossover-")
    env = {**os.environ, "CTXTOOL_CACHE_DIR": cache}
    every = json.dumps([str(sp.path) for sp in files])
    memoise = [sys.executable, "-c", _CROSSOVER_CHILD, every, "1"]
    subprocess.run(memoise, check=True, env=env, capture_output=True)
    everything = sum(os.path.getsize(sp.path) for sp in files)
    for mb in (4, 8, 16, 32, 64):
        if (mb // 2) * 2**20 >= everything:  # the previous size took it all
            break
        chosen: list[str] = []
        total = 0
        for sp in files:  # in the order found: projects and their sessions of every size, as a home holds
            if total >= mb * 2**20:
                break
            chosen.append(str(sp.path))
            total += os.path.getsize(sp.path)
        walls = {}
        for n in (1, cores):
            runs = []
            for _ in range(repeat):
                cmd = [sys.executable, "-c", _CROSSOVER_CHILD, json.dumps(chosen), str(n)]
                done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
                runs.append(float(done.stdout))
            walls[n] = min(runs)
        one, many = walls[1], walls[cores]
        quicker = "workers" if many < one else "one process"
        lines.append(
            f"  {total / 2**20:5.1f} MB, {len(chosen):3} files: one process {one:.3f}, "
            f"{cores} processes {many:.3f} ({quicker} quicker)"
        )
    shutil.rmtree(cache, ignore_errors=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path, help="session folder (default: the bench corpus)")
    parser.add_argument("--repeat", type=int, default=3, help="times each stage runs (best CPU time kept)")
    args = parser.parse_args(argv)
    root = args.corpus or make_corpus.build(size_mb=500)
    exe = str(Path(sys.executable).with_name("ctxtool"))
    if "polars" in sys.modules:
        raise SystemExit("profile.py must start without polars imported")
    rows: list[tuple[str, str, float]] = []

    # ------------------------------------------------------------------ start-up (child processes)
    env = {**os.environ, "CTXTOOL_NO_REPLAY": "1"}
    help_wall = min(child_run([exe, "stats", "--help"], env)[0] for _ in range(args.repeat))
    rows.append(("start-up: `ctxtool stats --help` (wall)", "parent", help_wall))
    imports = [
        sys.executable,
        "-c",
        "import ctxtool.cli.stats, ctxtool.frames.loading, ctxtool.session.scan, ctxtool.frames.tally",
    ]
    import_cpu = min(child_run(imports, env)[1] for _ in range(args.repeat))
    rows.append(("imports before the workers start", "parent", import_cpu))

    # ------------------------------------------------------------------ per file (the workers' share)
    from ctxtool.session import columns, discover, read, utf8

    started = time.process_time()
    found = discover.discover([root])
    rows.append(("finding and stat-ing the files", "parent", time.process_time() - started))
    files = found.files
    blobs = [Path(sp.path).read_bytes() for sp in files]

    def read_all() -> None:
        for sp in files:
            Path(sp.path).read_bytes()

    def utf8_all() -> None:
        for data in blobs:
            utf8.invalid_utf8(data)

    def decode_all() -> None:
        for sp, data in zip(files, blobs, strict=True):
            if read.sniff(data, Path(sp.path)) == "document":
                try:
                    columns._decode_record(data)
                    continue
                except Exception:  # what the reader then does (a lenient parse) is part of "the rest"
                    continue
            for line in read.line_views(data):
                try:
                    columns._decode_line(line)
                except read.BrokenLine:
                    continue

    results: list[columns.FileColumns] = []

    def extract_all() -> None:
        results[:] = [columns.extract_file(sp) for sp in files]

    t_read = cpu_best(args.repeat, read_all)
    t_utf8 = cpu_best(args.repeat, utf8_all)
    t_decode = cpu_best(args.repeat, decode_all)
    t_extract = cpu_best(args.repeat, extract_all)
    rows.append(("read the bytes", "per file", t_read))
    rows.append(("UTF-8 check (invalid lines counted)", "per file", t_utf8))
    rows.append(("msgspec decode of the records", "per file", t_decode))
    rest = t_extract - t_read - t_utf8 - t_decode
    rows.append(("rest: replay, rows, estimates, columns", "per file", rest))
    from ctxtool.frames import tally
    from ctxtool.measure.pricing import price_table

    counted: dict[str, tally.Measured | None] = {}

    def count_all() -> None:
        counted.clear()
        counted.update((fc.path, tally.count_and_price(fc)) for fc in results)

    rows.append(
        (
            "count and price each file's session (frames.tally.count_and_price)",
            "per file",
            cpu_best(args.repeat, count_all),
        )
    )
    rows.append(
        (
            "the report from the counts (frames.tally, --by session)",
            "parent",
            cpu_best(
                args.repeat,
                lambda: tally.session_rows(tally.tally(results, found, price_table, measured=dict(counted))),
            ),
        )
    )
    blob = pickle.dumps(results)
    rows.append(("worker start-up (fork, one empty task each)", "workers", pool_start_cpu(args.repeat)))
    rows.append(
        ("results sent back (pickle)", "workers", cpu_best(args.repeat, lambda: pickle.dumps(results)))
    )
    rows.append(("results received (unpickle)", "parent", cpu_best(args.repeat, lambda: pickle.loads(blob))))

    parallel = crossover(files, args.repeat)

    # ------------------------------------------------------------------ the parent's share
    started = time.process_time()
    from ctxtool import frames
    from ctxtool.frames import corpus as _corpus  # noqa: F401  (polars and the frames' schemas)
    from ctxtool.session.index import FileIndex

    # From here on: the frames (polars), which a first `stats --by session|model|project|day|week|month`
    # does not build (ctxtool.frames.tally); other reports and commands do. Shown, not summed.
    rows.append(("import polars and the frames module", IF_ASKED, time.process_time() - started))
    from ctxtool.measure import pricing

    models = sorted({model for m in counted.values() if m is not None for model in m.seen})
    with tempfile.TemporaryDirectory() as empty:  # a new user: no memo of the day's rates, the shipped ones
        os.environ["CTXTOOL_CACHE_DIR"] = empty
        pricing._read_snapshot.cache_clear()
        started = time.process_time()
        shipped = pricing.rates_memoised()
        pricing.price_table(models)
        label = "price rates (shipped in the package)" if shipped else "price rates (shipped ones unusable!)"
        rows.append((label, "parent", time.process_time() - started))
        del os.environ["CTXTOOL_CACHE_DIR"]
    started = time.process_time()
    frames.warm_up(price_memo=False)  # when the shipped rates cannot answer: genai-prices' data loads
    # on 2 cores the lone worker beside the parent would load it; not part of a new user's run (not summed)
    genai = time.process_time() - started
    rows.append(("(genai-prices' data, when the shipped rates cannot answer)", IF_ASKED, genai))

    def fresh() -> list[columns.FileColumns]:
        return pickle.loads(blob)  # type: ignore[no-any-return]

    def build() -> None:
        _ = frames.build_corpus(fresh(), found).turns  # the engine's columns into frames, turns derived

    rows.append(
        (
            "build the corpus (frames of the engine's columns)",
            IF_ASKED,
            cpu_best(args.repeat, build) - cpu_best(args.repeat, fresh),
        )
    )
    stats = [os.stat(sp.path) for sp in files]

    def index_writes() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            index = FileIndex(Path(tmp))
            for fc, st in zip(results, stats, strict=True):
                index.store(fc, st)
            index.save()
            index.close()

    rows.append(("index entries (encode + SQLite)", "parent", cpu_best(args.repeat, index_writes)))

    # ------------------------------------------------------------------ print
    total = sum(t for _, where, t in rows[1:] if where != IF_ASKED)
    width = max(len(name) for name, _, _ in rows)
    print(
        f"where a first `ctxtool stats` spends its time: {len(files)} files, "
        f"{sum(len(b) for b in blobs) / 1e6:.0f} MB, {os.cpu_count()} cores; CPU s, best of {args.repeat}"
    )
    print(f"{'stage':<{width}}  {'process':<8} {'CPU s':>6} {'share':>6}")
    for name, where, seconds in rows:
        share = "" if name.startswith("start-up") or where == IF_ASKED else f"{seconds / total:6.0%}"
        print(f"{name:<{width}}  {where:<8} {seconds:6.3f} {share:>6}")
    # Per-file work is shared by the parent and its workers (the parent parses beside them).
    shared = sum(t for _, where, t in rows if where in ("per file", "workers", "worker"))
    parent = sum(t for name, where, t in rows[1:] if where == "parent")
    print(f"{'sum: files and workers / parent alone':<{width}}  {'':<8} {shared:6.3f} / {parent:.3f}")

    print("\n".join(parallel))
    # As bench/peers.py runs them: per round a new cache folder, the first run, then --no-cache beside it.
    stats_cmd = [exe, "stats", str(root), "--by", "session", "--format", "json"]
    runs: dict[str, list[tuple[float, float]]] = {"first run (index on)": [], "stats --no-cache": []}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as cache:
            run_env = {**env, "CTXTOOL_CACHE_DIR": cache}
            runs["first run (index on)"].append(child_run(stats_cmd, run_env))
            runs["stats --no-cache"].append(child_run([*stats_cmd, "--no-cache"], run_env))
    for label, measured in runs.items():
        wall, cpu = min(measured)
        print(f"{'real run: ' + label:<{width}}  wall {wall:.2f} s, CPU of all its processes {cpu:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
