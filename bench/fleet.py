"""Fleet benchmark: a team's dataset of N machines x D days, read back by ``ctxtool stats DATASET --by user``.

``.venv/bin/python bench/fleet.py [--machines 200 --days 90 ...]`` (the last step of ``make bench``):

1. builds (or reuses) a fleet: one synthetic Gemini CLI home per machine (``bench/fleet_gen.py``), several
   sessions a day each, and exports every machine into one dataset folder with the CLI, as each machine of a
   team would: ``ctxtool export HOME --to DATASET --machine M --user U`` (users shared by a few machines;
   ``GEMINI_CLI_HOME=HOME`` and a ``CTXTOOL_CACHE_DIR`` of the machine's own), two exports at a time. Homes
   and dataset are kept in ``~/.cache/ctxtool-bench/fleet/<parameters>/`` (or ``$CTXTOOL_BENCH_CACHE``), so a
   second run reuses them; the dataset is exported again when ctxtool's version or dataset schema changed
   (``--reexport`` forces it);
2. times the first runs (``CTXTOOL_CACHE_DIR`` empty) of ``ctxtool stats DATASET --by user``, ``--by
   machine``, ``--by day``, ``--by user --since`` the fleet's last 7 days, and ``audit DATASET``
   (``--second-run``: ``--by user`` again with the same cache): wall time, peak RSS of the process tree
   (sampled from ``/proc``) and of the largest process (``/usr/bin/time -v``), as ``bench/run.py`` does, one
   run each (at the default size a run takes minutes);
3. times an incremental export: one machine's first export (an empty ``CTXTOOL_CACHE_DIR``: its index and
   export state are built; every session written again, to the same keys) against the export that follows
   one new session file in its home (and, for reference, the export when nothing changed); prints the
   objects each wrote and the ratio incremental / first. The added sessions and their objects are removed
   afterwards, so the cached fleet stays as built;
4. checks once per dataset (``--check`` again, ``--no-check`` never) that ``stats DATASET --by user --format
   json`` equals, user by user, the sum of ``ctxtool stats HOME --format json --no-cache`` over that user's
   homes: tokens and requests exactly, cost within a cent.

``--profile`` adds a cProfile of ``stats DATASET --by user`` (top functions by cumulative and own time) and
where its memory goes (RSS and the frames' ``estimated_size`` after each step of reading the dataset). A
benchmark, not a test: it prints numbers and exits 0 unless it cannot run or the check fails (exit 1).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fleet_gen  # a sibling script, not a package
import run  # a sibling script: measure() and the ctxtool executable

TOKEN_FIELDS = ("requests", "input", "output", "cached", "prompt_tokens", "thoughts", "tool", "total")
COST_TOLERANCE = 0.01
STATS_TIMEOUT_S = 3600


def bench_cache() -> Path:
    base = os.environ.get("CTXTOOL_BENCH_CACHE") or os.path.join(Path.home(), ".cache", "ctxtool-bench")
    return Path(base) / "fleet"


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _save(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(tmp, path)


def _tail(data: bytes | str, lines: int = 3) -> str:
    text = (data.decode(errors="replace") if isinstance(data, bytes) else data).strip().splitlines()
    return " | ".join(text[-lines:]) if text else "no output"


def _python_of(exe: str) -> str:
    first = Path(exe).read_bytes()[:512].split(b"\n", 1)[0]
    return first[2:].decode().strip() if first.startswith(b"#!") else sys.executable


_DIGEST = r"""
import hashlib, pathlib, ctxtool
h = hashlib.sha256()
for p in sorted(pathlib.Path(ctxtool.__file__).parent.rglob("*.py")):
    h.update(p.as_posix().encode() + b"\0" + p.read_bytes())
print(h.hexdigest()[:12])
"""


def source_digest(exe: str) -> str:
    """A digest of the measured ctxtool's sources: a run whose digest changed measured two versions (an
    editable install sees every edit at once)."""
    done = subprocess.run([_python_of(exe), "-c", _DIGEST], capture_output=True, text=True, timeout=120)
    return done.stdout.strip() or "?"


def _version(exe: str) -> str:
    """ctxtool's version and the dataset schema it writes: a dataset exported by another is exported again."""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120).stdout.strip()
    code = "from ctxtool.export import DATASET_SCHEMA_VERSION as v; print(v)"
    schema = subprocess.run([_python_of(exe), "-c", code], capture_output=True, text=True, timeout=120)
    return f"{out} / dataset schema {schema.stdout.strip() or '?'}"


# ---------------------------------------------------------------- 1. the fleet


def _build_one(params: fleet_gen.Params, index: int, home: str) -> dict[str, int]:
    shutil.rmtree(home, ignore_errors=True)
    return asdict(fleet_gen.build_machine(params, index, Path(home)))


def build_homes(params: fleet_gen.Params, base: Path, jobs: int) -> dict[str, Any]:
    """Every machine's home under ``base/homes`` (reused when ``homes.json`` lists it); the manifest."""
    manifest_path = base / "homes.json"
    manifest = _load(manifest_path)
    if manifest.get("key") != params.key:
        manifest = {"key": params.key, "machines": {}, "seconds": 0.0}
    done: dict[str, Any] = manifest["machines"]
    todo = [i for i in range(params.machines) if params.machine(i) not in done]
    if not todo:
        print(
            f"fleet: reusing {len(done)} homes in {base / 'homes'} (generated in {manifest['seconds']:.0f} s)"
        )
        return manifest
    print(f"fleet: generating {len(todo)} of {params.machines} homes in {base / 'homes'} ({jobs} processes)")
    start = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {
            pool.submit(_build_one, params, i, str(base / "homes" / params.machine(i))): i for i in todo
        }
        for n, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            i = futures[fut]
            done[params.machine(i)] = fut.result()
            if n % 20 == 0 or n == len(todo):
                manifest["seconds"] = manifest.get("seconds", 0.0) + time.perf_counter() - start
                start = time.perf_counter()
                _save(manifest_path, manifest)
                print(f"  {n}/{len(todo)} homes, {manifest['seconds']:.0f} s so far", flush=True)
    return manifest


def _export_cmd(exe: str, home: Path, dataset: Path, machine: str, user: str) -> list[str]:
    return [exe, "export", str(home), "--to", str(dataset), "--machine", machine, "--user", user, "--json"]


def _export_env(home: Path, cache: Path) -> dict[str, str]:
    return {**os.environ, "GEMINI_CLI_HOME": str(home), "CTXTOOL_CACHE_DIR": str(cache)}


def _export_one(exe: str, params: fleet_gen.Params, i: int, base: Path) -> dict[str, Any]:
    machine, home = params.machine(i), base / "homes" / params.machine(i)
    cache = base / "state" / machine
    shutil.rmtree(cache, ignore_errors=True)  # a machine's first export
    cmd = _export_cmd(exe, home, base / "dataset", machine, params.user(i))
    m = run.measure(cmd, _export_env(home, cache), timeout=STATS_TIMEOUT_S)
    shutil.rmtree(cache, ignore_errors=True)  # the index of the home: not needed again
    if m.returncode != 0:
        raise RuntimeError(f"export of {machine} failed (exit {m.returncode}): {_tail(m.stderr)}")
    doc = orjson.loads(m.stdout)
    return {"wall": m.wall, "tree_mb": m.tree_mb, "proc_mb": m.proc_mb, "objects": doc["objects"],
            "sessions": len(doc["written"]), "requests": doc["rows"].get("requests", 0)}  # fmt: skip


def export_fleet(
    exe: str, params: fleet_gen.Params, base: Path, jobs: int, version: str, again: bool
) -> dict[str, Any]:
    """Every machine exported into ``base/dataset`` (reused when ``exports.json`` lists it, by this
    ctxtool)."""
    manifest_path = base / "exports.json"
    manifest = _load(manifest_path)
    if again or manifest.get("key") != params.key or manifest.get("ctxtool") != version:
        if manifest:
            why = "--reexport" if again else f"exported by {manifest.get('ctxtool')}, now {version}"
            print(f"fleet: exporting the dataset again ({why})")
        shutil.rmtree(base / "dataset", ignore_errors=True)
        manifest = {"key": params.key, "ctxtool": version, "machines": {}, "seconds": 0.0}
    done: dict[str, Any] = manifest["machines"]
    todo = [i for i in range(params.machines) if params.machine(i) not in done]
    if not todo:
        print(f"fleet: reusing the dataset {base / 'dataset'} (exported in {manifest['seconds']:.0f} s)")
        return manifest
    print(
        f"fleet: exporting {len(todo)} of {params.machines} machines into {base / 'dataset'}, "
        f"{jobs} at a time"
    )
    manifest.pop("dataset", None)
    manifest.pop("check", None)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(_export_one, exe, params, i, base): i for i in todo}
        for n, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            done[params.machine(futures[fut])] = fut.result()
            if n % 10 == 0 or n == len(todo):
                manifest["seconds"] += time.perf_counter() - start
                start = time.perf_counter()
                _save(manifest_path, manifest)
                print(f"  {n}/{len(todo)} machines exported, {manifest['seconds']:.0f} s so far", flush=True)
    return manifest


def dataset_size(dataset: Path) -> dict[str, int]:
    objects = size = 0
    stack = [str(dataset)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.name.endswith(".parquet"):
                    objects += 1
                    size += entry.stat(follow_symlinks=False).st_size
    return {"objects": objects, "bytes": size}


# ---------------------------------------------------------------- 2.-3. measures


def measure_stats(
    exe: str, dataset: Path, by: str, cache: Path, fmt: str = "table", extra: tuple[str, ...] = ()
) -> run.Measure:
    cmd = [exe, "stats", str(dataset), "--by", by, "--format", fmt, *extra]
    return run.measure(cmd, {**os.environ, "CTXTOOL_CACHE_DIR": str(cache)}, timeout=STATS_TIMEOUT_S)


_KEYS_OF = r"""
import sys, orjson
from ctxtool.export import TABLES, dataset_key, relative_place
machine, root, *paths = sys.argv[1:]
keys = [dataset_key(machine, relative_place(p.rsplit(".", 1)[0], [root]) or p) for p in paths]  # group_key
print(orjson.dumps({"tables": list(TABLES), "keys": keys}).decode())
"""


def _pending_path(base: Path) -> Path:
    return base / "incremental-pending.json"


def undo_added(base: Path) -> None:
    """Remove the sessions an incremental run added, from the home and from the dataset (also after a run
    that was killed): the cached fleet stays as it was built."""
    pending = _load(_pending_path(base))
    for path in pending.get("files", []):
        Path(path).unlink(missing_ok=True)
    dataset = base / "dataset"
    for key in pending.get("keys", []):
        for table in pending.get("tables", []):
            (dataset / table / f"machine={pending['machine']}" / f"{key}.parquet").unlink(missing_ok=True)
    _pending_path(base).unlink(missing_ok=True)


def incremental(
    exe: str, params: fleet_gen.Params, base: Path, index: int, repeat: int
) -> list[tuple[str, run.Measure | None, str, dict[str, Any] | None]]:
    """Machine ``index``'s first export, its export after one new session (``repeat`` times, a new session
    each time), and after nothing changed."""
    machine, user = params.machine(index), params.user(index)
    home, dataset = base / "homes" / machine, base / "dataset"
    cmd = _export_cmd(exe, home, dataset, machine, user)
    extra = [fleet_gen.extra_session(params, index, home, n) for n in range(repeat)]
    root = home / ".gemini" / "tmp"
    keys_cmd = [_python_of(exe), "-c", _KEYS_OF, machine, str(root), *(str(p) for p, _, _ in extra)]
    found = subprocess.run(keys_cmd, capture_output=True, timeout=120)
    if found.returncode != 0:
        return [("export rows", None, f"dataset keys unknown: {_tail(found.stderr)}", None)]
    pending = {"machine": machine, "files": [str(p) for p, _, _ in extra], **orjson.loads(found.stdout)}
    _save(_pending_path(base), pending)
    rows: list[tuple[str, run.Measure | None, str, dict[str, Any] | None]] = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        try:
            firsts = []
            for r in range(repeat):
                cache = Path(tmp) / f"first-{r}"
                firsts.append(run.measure(cmd, _export_env(home, cache), STATS_TIMEOUT_S))
            first = run._reported(firsts)
            if first.returncode != 0:
                return [("export, first", None, f"exit {first.returncode}: {_tail(first.stderr)}", None)]
            rows.append(("export, first (empty cache)", first, f"{machine}: index and export state built",
                         orjson.loads(first.stdout)))  # fmt: skip
            grown = []
            for path, data, _ in extra:  # from the last first run's state, one more session each time
                path.write_bytes(data)
                m = run.measure(cmd, _export_env(home, cache), STATS_TIMEOUT_S)
                if m.returncode != 0:
                    why = f"exit {m.returncode}: {_tail(m.stderr)}"
                    return [*rows, ("export, one session added", None, why, None)]
                grown.append((m, orjson.loads(m.stdout)))
                pending["keys"] = sorted({*pending["keys"], *grown[-1][1]["written"]})  # the run's own word
                _save(_pending_path(base), pending)
            best = run._reported([m for m, _ in grown])
            doc = next(d for m, d in grown if m is best)
            rows.append(
                ("export, one session added", best, f"{machine}: a {extra[0][2]}-request session", doc)
            )
            same = run._reported(
                [run.measure(cmd, _export_env(home, cache), STATS_TIMEOUT_S) for _ in range(repeat)]
            )
            rows.append(("export, nothing changed", same, f"{machine}: for reference",
                         orjson.loads(same.stdout) if same.returncode == 0 else None))  # fmt: skip
        finally:
            undo_added(base)
    return rows


# ---------------------------------------------------------------- 4. the check


def _home_totals(exe: str, home: Path) -> dict[str, Any]:
    cmd = [exe, "stats", str(home), "--format", "json", "--no-cache"]
    env = {**os.environ, "GEMINI_CLI_HOME": str(home)}
    done = subprocess.run(cmd, capture_output=True, env=env, timeout=STATS_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"stats {home} failed (exit {done.returncode}): {_tail(done.stderr)}")
    totals: dict[str, Any] = orjson.loads(done.stdout)["totals"]
    return totals


def check(
    exe: str, params: fleet_gen.Params, base: Path, by_user: bytes, jobs: int
) -> tuple[bool, list[str]]:
    """The dataset's totals per user against the sum of its homes' own ``stats``."""
    start = time.perf_counter()
    homes = {params.machine(i): base / "homes" / params.machine(i) for i in range(params.machines)}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        found = dict(zip(homes, pool.map(lambda h: _home_totals(exe, h), homes.values()), strict=True))
    expected: dict[str, dict[str, float]] = {}
    for i in range(params.machines):
        user = expected.setdefault(params.user(i), dict.fromkeys((*TOKEN_FIELDS, "cost"), 0))
        for name in (*TOKEN_FIELDS, "cost"):
            user[name] += found[params.machine(i)].get(name) or 0
    doc = orjson.loads(by_user)
    got = {row["user"]: row for row in doc["rows"]}
    problems = []
    if set(got) != set(expected):
        problems.append(f"users differ: dataset {sorted(set(got) - set(expected))[:5]}, homes "
                        f"{sorted(set(expected) - set(got))[:5]}")  # fmt: skip
    for user in sorted(set(got) & set(expected)):
        for name in TOKEN_FIELDS:
            if got[user].get(name) != expected[user][name]:
                problems.append(f"{user} {name}: dataset {got[user].get(name)}, homes {expected[user][name]}")
        if abs((got[user].get("cost") or 0) - expected[user]["cost"]) > COST_TOLERANCE:
            problems.append(f"{user} cost: dataset {got[user].get('cost')}, homes {expected[user]['cost']}")
    sums = {name: sum(u[name] for u in expected.values()) for name in (*TOKEN_FIELDS, "cost")}
    for name in TOKEN_FIELDS:
        if doc["totals"].get(name) != sums[name]:
            problems.append(f"totals {name}: dataset {doc['totals'].get(name)}, homes {sums[name]}")
    if abs((doc["totals"].get("cost") or 0) - sums["cost"]) > COST_TOLERANCE:
        problems.append(f"totals cost: dataset {doc['totals'].get('cost')}, homes {sums['cost']}")
    seconds = time.perf_counter() - start
    summary = (f"{len(expected)} users, {params.machines} homes ({seconds:.0f} s): "
               f"{sums['requests']:,} requests, {sums['total']:,} tokens, ${sums['cost']:,.2f}")  # fmt: skip
    return not problems, [summary, *problems[:20]]


# ---------------------------------------------------------------- --profile

_MEMORY_PROBE = r"""
import inspect, sys, time
def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
def mem():
    return f"rss {status('VmRSS:'):6.0f} MB, peak {status('VmHWM:'):6.0f} MB"
mode, where = sys.argv[1:]
t = time.perf_counter()
import polars as pl
from ctxtool import export as ex
from ctxtool.store import Store
print(f"[{mode}] imports (polars, ctxtool.export): {mem()}, {time.perf_counter() - t:.2f} s")
store = Store.at(where)
if mode == "tables":  # every table read whole, one after the other (what a report of messages needs)
    from ctxtool import frames
    template = frames.build_corpus([])
    t = time.perf_counter()
    listed = {table: ex._objects(store, table, False) for table in ex.TABLES}
    n = sum(map(len, listed.values()))
    print(f"[{mode}] listing {n:,} objects: {mem()}, {time.perf_counter() - t:.2f} s")
    for table in ex.TABLES:
        t = time.perf_counter()
        df = ex._read_table(store, table, [k for k, _ in listed[table]], getattr(template, table))
        mb = df.estimated_size() / 1e6
        print(f"[{mode}] read {table:<10} {df.height:>10,} rows x {df.width:>3} cols = {mb:7.0f} MB frame; "
              f"{mem()}, {time.perf_counter() - t:6.2f} s")
        del df
else:  # load_dataset as `stats --by user` calls it (sums=True when this ctxtool has it), or whole
    has_sums = "sums" in inspect.signature(ex.load_dataset).parameters
    kwargs = {"sums": True} if mode == "sums" and has_sums else {}
    t = time.perf_counter()
    corpus = ex.load_dataset(where, **kwargs)
    sizes = {n: getattr(corpus, n).estimated_size() / 1e6 for n in ex.TABLES}
    print(f"[{mode}] load_dataset({', '.join(f'{k}={v}' for k, v in kwargs.items())}): "
          f"{time.perf_counter() - t:.2f} s; frames " + ", ".join(f"{n} {s:.0f} MB" for n, s in sizes.items())
          + f"; {mem()}")
"""


_PROFILED_RUN = r"""
import cProfile, os, sys
out = sys.argv.pop(1)
sys.argv[0] = "ctxtool"
def _exit(code):  # ctxtool ends with os._exit (no teardown): let the profile be written first
    raise SystemExit(code)
os._exit = _exit
profile = cProfile.Profile()
profile.enable()
try:
    from ctxtool.__main__ import main
    main()
except SystemExit:
    pass
finally:
    profile.disable()
    profile.dump_stats(out)
"""


def profile(exe: str, dataset: Path, full: bool = False) -> list[str]:
    """cProfile of one first run of ``stats DATASET --by user`` (its main thread, imports included), then
    the memory of reading the dataset as that run does (``full``: also every table whole, and the whole
    ``load_dataset`` that reports of messages, turns or filters use)."""
    python = _python_of(exe)
    lines = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-prof-") as tmp:
        out, script = Path(tmp) / "stats.prof", Path(tmp) / "profiled.py"
        script.write_text(_PROFILED_RUN)
        env = {**os.environ, "CTXTOOL_CACHE_DIR": str(Path(tmp) / "cache")}
        cmd = [python, str(script), str(out), "stats", str(dataset), "--by", "user"]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, env=env, timeout=STATS_TIMEOUT_S)
        wall = time.perf_counter() - start
        if not out.exists():
            return [f"profile: failed (exit {done.returncode}): {_tail(done.stderr)}"]
        code = (
            "import pstats, sys; s = pstats.Stats(sys.argv[1]); "
            "s.sort_stats('cumulative').print_stats(35); s.sort_stats('tottime').print_stats(15)"
        )
        shown = subprocess.run([python, "-c", code, str(out)], capture_output=True, text=True, timeout=300)
        lines.append(f"(profiled run: {wall:.2f} s wall)")
        lines += [line.rstrip() for line in shown.stdout.splitlines() if line.strip()]
        probe = Path(tmp) / "probe.py"
        probe.write_text(_MEMORY_PROBE)
        lines.append("memory, step by step (ctxtool.export's reader called directly, one process per mode):")
        for mode in ("sums", *(("tables", "whole") if full else ())):
            cmd = [python, str(probe), mode, str(dataset)]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=STATS_TIMEOUT_S)
            lines += ["  " + line for line in done.stdout.splitlines()]
            if done.returncode != 0:
                lines.append(f"  probe {mode} failed (exit {done.returncode}): {_tail(done.stderr)}")
    return lines


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    defaults = fleet_gen.Params()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--machines", type=int, default=defaults.machines)
    parser.add_argument("--days", type=int, default=defaults.days)
    parser.add_argument("--sessions-per-day", type=int, default=defaults.sessions_per_day, help="mean")
    parser.add_argument(
        "--requests-per-session", type=int, default=defaults.requests_per_session, help="mean"
    )
    parser.add_argument("--machines-per-user", type=int, default=defaults.machines_per_user)
    parser.add_argument("--end", default=defaults.end, help="the fleet's last day (ISO date)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--jobs", type=int, default=2, help="homes generated and machines exported at once")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each export row (best wall is shown)")
    parser.add_argument("--ctxtool", help="ctxtool executable (default: the one beside this Python)")
    parser.add_argument(
        "--cache", type=Path, help="where fleets are kept (default: ~/.cache/ctxtool-bench/fleet)"
    )
    parser.add_argument("--reexport", action="store_true", help="export every machine again")
    parser.add_argument("--check", action="store_true", help="check the dataset again against the homes")
    parser.add_argument("--no-check", action="store_true", help="skip the check")
    parser.add_argument("--second-run", action="store_true", help="also time stats --by user again, warm")
    parser.add_argument("--profile", action="store_true", help="profile stats --by user: time and memory")
    parser.add_argument(
        "--profile-full", action="store_true", help="with --profile: also every table read whole (slow)"
    )
    parser.add_argument("--build-only", action="store_true", help="build or reuse the fleet, measure nothing")
    args = parser.parse_args(argv)
    params = fleet_gen.Params(args.machines, args.days, args.sessions_per_day, args.requests_per_session,
                              args.machines_per_user, args.end, args.seed)  # fmt: skip
    exe = args.ctxtool or run.ctxtool_exe()
    if exe is None:
        print("Error: no ctxtool executable (pass --ctxtool)", file=sys.stderr)
        return 2
    base = (args.cache or bench_cache()) / params.key
    base.mkdir(parents=True, exist_ok=True)
    version = _version(exe)
    digest = source_digest(exe)
    load = os.getloadavg()[0]
    print(f"ctxtool: {exe} ({version}, sources {digest}; {run.byte_compile(exe)}); {os.cpu_count()} cores, "
          f"load average {load:.1f}")  # fmt: skip
    homes = build_homes(params, base, args.jobs)
    undo_added(base)  # what a killed run's incremental rows may have left in a home and the dataset
    exports = export_fleet(exe, params, base, args.jobs, version, args.reexport)
    dataset = base / "dataset"
    if "dataset" not in exports:
        exports["dataset"] = dataset_size(dataset)
        _save(base / "exports.json", exports)
    totals = fleet_gen.Counts()
    for counts in homes["machines"].values():
        totals.add(fleet_gen.Counts(**counts))
    users = len({params.user(i) for i in range(params.machines)})
    walls = sorted(m["wall"] for m in exports["machines"].values())
    size = exports["dataset"]
    print(
        f"fleet: {params.machines} machines x {params.days} days, {users} users; {totals.sessions:,} "
        f"sessions + {totals.subagents:,} subagent sessions, {totals.requests:,} requests; homes "
        f"{totals.bytes / 1e9:.2f} GB "
        f"in {totals.files:,} files (generated in {homes['seconds']:.0f} s, {args.jobs} processes)\n"
        f"dataset: {size['objects']:,} objects, {size['bytes'] / 1e9:.2f} GB ({dataset}); exported in "
        f"{exports['seconds']:.0f} s, {args.jobs} at a time: one machine's first export median "
        f"{walls[len(walls) // 2]:.1f} s, max {walls[-1]:.1f} s, sum {sum(walls):.0f} s"
    )
    if args.build_only:
        return 0

    need_check = not args.no_check and (args.check or "check" not in exports)
    rows: list[tuple[str, run.Measure | None, str]] = []
    as_json = None
    with tempfile.TemporaryDirectory(prefix="bench-fleet-stats-") as tmp:
        for by in ("user", "machine", "day"):
            m = measure_stats(exe, dataset, by, Path(tmp) / f"first-{by}")
            rows.append((f"stats --by {by}, first run", m, "CTXTOOL_CACHE_DIR empty"))
            if by == "user" and args.second_run:
                again = measure_stats(exe, dataset, by, Path(tmp) / f"first-{by}")
                rows.append(("stats --by user, second run", again, "the same cache, right after"))
        week = (date.fromisoformat(params.end) - timedelta(days=6)).isoformat()
        dated = measure_stats(exe, dataset, "user", Path(tmp) / "week", extra=("--since", week))
        rows.append((f"stats --by user --since {week}", dated, "first run; the fleet's last 7 days"))
        # Every session checked apart, a few thousand at a time (budgets no session exceeds: exit 0).
        budgets = ["--max-session-tokens", "1G", "--max-daily-cost", "1000000"]
        cmd = [exe, "audit", str(dataset), *budgets, "--format", "json", "--output", f"{tmp}/audit.json"]
        audited = run.measure(
            cmd, {**os.environ, "CTXTOOL_CACHE_DIR": f"{tmp}/audit"}, timeout=STATS_TIMEOUT_S
        )
        rows.append(("audit DATASET", audited, "first run; max-session-tokens, max-daily-cost"))
        if need_check:
            as_json = measure_stats(exe, dataset, "user", Path(tmp) / "json", "json")
            rows.append(("stats --by user --format json", as_json, "first run; the check's figures"))
    export_rows = incremental(exe, params, base, 0, args.repeat)
    for name, m, note, doc in export_rows:
        if doc is not None:
            note += f"; wrote {len(doc['written'])} sessions, {doc['objects']:,} objects"
        rows.append((name, m, note))

    print(f"\n{'row':<36} {'wall s':>8} {'tree MB':>8} {'max proc MB':>12}  note")
    for name, m, note in rows:
        if m is None or m.returncode != 0:
            why = note if m is None else f"exit {m.returncode}: {_tail(m.stderr)}"
            print(f"{name:<36} {'-':>8} {'-':>8} {'-':>12}  {why}")
            continue
        print(f"{name:<36} {m.wall:>8.2f} {m.tree_mb:>8.0f} {m.proc_mb:>12.0f}  {note}")
    found = {name: m for name, m, _, _ in export_rows if m is not None and m.returncode == 0}
    first, grown = found.get("export, first (empty cache)"), found.get("export, one session added")
    if first is not None and grown is not None:
        print(
            f"\nincremental / first export: {grown.wall:.2f} s / {first.wall:.2f} s = "
            f"{grown.wall / first.wall:.3f}"
        )
    user_first = rows[0][1]
    if user_first is not None and user_first.returncode == 0:
        per_request = user_first.wall / max(totals.requests, 1) * 1e6
        print(f"stats --by user, first run: {per_request:.1f} us a request, "
              f"{user_first.wall / max(size['objects'], 1) * 1e3:.2f} ms an object")  # fmt: skip

    status = 0
    if as_json is not None:
        if as_json.returncode != 0:
            print(f"\ncheck: not run (stats --by user --format json failed: {_tail(as_json.stderr)})")
            status = 1
        else:
            ok, lines = check(exe, params, base, as_json.stdout, args.jobs)
            exports["check"] = {"ok": ok, "lines": lines}
            _save(base / "exports.json", exports)
    if "check" in exports and not args.no_check:
        verdict = "PASS" if exports["check"]["ok"] else "FAIL"
        when = (
            ""
            if as_json is not None
            else " (as checked when this dataset was built; --check to run it again)"
        )
        print(f"\ncheck: dataset --by user = sum of the homes' own stats, per user -> {verdict}{when}")
        for line in exports["check"]["lines"]:
            print(f"  {line}")
        status = status or (0 if exports["check"]["ok"] else 1)
    after = source_digest(exe)
    if after != digest:
        print(f"\nwarning: ctxtool's sources changed during the run ({digest} -> {after}): "
              "the rows may measure two versions")  # fmt: skip
    print(f"load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    if args.profile:
        print("\nprofile of stats DATASET --by user (cProfile; first run, empty cache):")
        print("\n".join(profile(exe, dataset, args.profile_full)))
    return status


if __name__ == "__main__":
    sys.exit(main())
