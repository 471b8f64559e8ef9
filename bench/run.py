"""Speed and memory benchmark: ctxtool against an orjson floor measured in the same run (``make bench``).

Measures, each best of ``--repeat`` runs (default 3; wall time is the minimum, memory the maximum):

(a) floor: every corpus file read and parsed with orjson (``.jsonl`` line by line, ``.json`` whole) by a
    ``ProcessPoolExecutor`` on all cores, run as its own child process;
(b) ctxtool cold: ``ctxtool stats <corpus> --by session --format json [--no-cache]``;
(c) peers, when installed on PATH: ``ccusage gemini session --offline --json`` (``GEMINI_DATA_DIR``) and
    ``tokscale models --json -c gemini --group-by session,model`` (``GEMINI_CLI_HOME``).

Memory is reported twice: "tree MB" is the peak of the summed RSS of the child and all its descendants,
sampled from /proc every 50 ms (a process pool's workers add up); "max proc MB" is the largest single
process's peak RSS from ``/usr/bin/time -v`` (or ``getrusage(RUSAGE_CHILDREN)`` without it).
This is a benchmark, not a test: it prints numbers and target verdicts and exits 0 unless it cannot run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import guard_bench  # a sibling script, not a package
import make_corpus  # a sibling script, not a package
import peers as side_by_side  # a sibling script, not a package
import scenarios
from peers import LARGE_TARGETS, SMALL_TARGETS

REPO = Path(__file__).resolve().parents[1]
SMALL_HOME = REPO / "bench" / "home"  # the 43 real sessions laid out once as a home (git-ignored)
COLD_TARGET = 1.5  # ctxtool cold wall time must stay within 1.5x the floor
PEER_TARGET = 0.8  # ... and within 0.8x ccusage's
PEER_TIMEOUT_S = 900


# ---------------------------------------------------------------- floor (runs in a child process)


def parse_file(path: str) -> tuple[int, int]:
    """Read and parse one session file with orjson; return (bytes, records parsed)."""
    data = Path(path).read_bytes()
    if path.endswith(".jsonl"):
        records = 0
        for number, line in enumerate(data.split(b"\n")):
            if not line.strip():
                continue
            try:
                orjson.loads(line)
            except orjson.JSONDecodeError:
                if number == 0:  # a ".jsonl" name holding one JSON document, as some real files do
                    orjson.loads(data)
                    return len(data), 1
                continue
            records += 1
        return len(data), records
    orjson.loads(data)
    return len(data), 1


def session_files(root: Path) -> list[str]:
    files = [str(p) for p in root.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file()]
    # Largest first so the pool's tail is short.
    return sorted(files, key=lambda f: -os.path.getsize(f))


def floor_main(root: Path) -> int:
    files = session_files(root)
    workers = os.cpu_count() or 1
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(parse_file, files, chunksize=4))
    total = sum(b for b, _ in results)
    records = sum(r for _, r in results)
    print(orjson.dumps({"files": len(files), "bytes": total, "records": records}).decode())
    return 0


# ---------------------------------------------------------------- measuring a child process tree


@dataclass
class Measure:
    wall: float
    tree_mb: float
    proc_mb: float
    returncode: int
    stdout: bytes
    stderr: bytes


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree_rss_kb(root: int) -> int:
    children = _children_map()
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += _rss_kb(pid)
        stack.extend(children.get(pid, ()))
    return total


def measure(
    cmd: Sequence[str], env: Mapping[str, str] | None = None, timeout: float | None = None
) -> Measure:
    """Run ``cmd``; wall time, peak summed RSS of its process tree, and peak RSS of its largest process."""
    gnu_time = Path("/usr/bin/time")
    use_time = gnu_time.exists()
    with tempfile.NamedTemporaryFile(prefix="bench-time-", suffix=".txt", delete=False) as report:
        report_path = report.name
    full = [str(gnu_time), "-v", "-o", report_path, *cmd] if use_time else list(cmd)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    peak_kb = 0
    start = time.perf_counter()
    proc = subprocess.Popen(full, env=dict(env) if env is not None else None, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_kb
        while not done.is_set():
            peak_kb = max(peak_kb, _tree_rss_kb(proc.pid))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\n(bench: killed after {timeout:.0f} s)".encode()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    proc_kb = 0
    if use_time:
        text = Path(report_path).read_text(errors="replace")
        found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
        proc_kb = int(found.group(1)) if found else 0
        code = re.search(r"Exit status: (\d+)", text)
        returncode = int(code.group(1)) if code else proc.returncode
    else:
        after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        proc_kb = after if after > before else 0  # only a new maximum is attributable to this child
        returncode = proc.returncode
    os.unlink(report_path)
    return Measure(wall, peak_kb / 1024, proc_kb / 1024, returncode, out, err)


def best_of(repeat: int, cmd: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float | None = None) -> Measure:  # fmt: skip
    return _reported([measure(cmd, env, timeout) for _ in range(repeat)])


def in_rounds(
    repeat: int, commands: Sequence[tuple[str, list[str], Mapping[str, str] | None]]
) -> dict[str, Measure]:
    """Each command's best of ``repeat`` runs, run in rounds (one run of every command per round)."""
    runs: dict[str, list[Measure]] = {name: [] for name, _, _ in commands}
    for _ in range(repeat):
        for name, cmd, env in commands:
            runs[name].append(measure(cmd, env, PEER_TIMEOUT_S))
    return {name: _reported(measured) for name, measured in runs.items()}


def _reported(runs: list[Measure]) -> Measure:
    """The run a row reports: the first that failed, else the best (``scenarios.best_run``)."""
    failed = [r for r in runs if r.returncode != 0]
    if failed:
        return failed[0]
    best: Measure = scenarios.best_run(runs)
    return best


# ---------------------------------------------------------------- the contenders


def ctxtool_exe() -> str | None:
    local = Path(sys.executable).parent / "ctxtool"
    return str(local) if local.exists() else shutil.which("ctxtool")


def byte_compile(exe: str) -> str:
    """Compile the measured ctxtool's modules to bytecode, as installing a wheel does; returns a note.

    Without this, a shell with PYTHONDONTWRITEBYTECODE set (some containers and CI images set it) compiles
    every ctxtool module from source on every run, a cost no installed copy pays.
    """
    try:
        first = Path(exe).read_bytes()[:512].split(b"\n", 1)[0]
    except OSError as exc:
        return f"not byte-compiled ({exc.strerror})"
    python = first[2:].decode(errors="replace").strip() if first.startswith(b"#!") else sys.executable
    code = (
        "import compileall, os, ctxtool; compileall.compile_dir(os.path.dirname(ctxtool.__file__), quiet=1)"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    return "byte-compiled" if done.returncode == 0 else f"not byte-compiled ({_tail(done.stderr.encode())})"


def ctxtool_command(root: Path, exe: str | None) -> tuple[list[str] | None, str]:
    """The cold stats command, or None with the reason it cannot run yet."""
    if exe is None:
        return None, "no ctxtool executable (run `make bench`, which installs the package into .venv)"
    probe = subprocess.run([exe, "stats", "--help"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        first = (probe.stderr or probe.stdout).strip().splitlines()
        return None, f"`ctxtool stats --help` failed ({first[-1] if first else 'no output'})"
    cmd = [exe, "stats", str(root), "--by", "session", "--format", "json"]
    note = ""
    if "--no-cache" in probe.stdout:
        cmd.append("--no-cache")
    else:
        note = "ctxtool stats has no --no-cache flag yet: ran without it"
    return cmd, note


def peer_commands(root: Path, home: Path) -> list[tuple[str, list[str], dict[str, str], str]]:
    """(name, command, environment, note) for each peer on PATH, pointed at the corpus, not at ~/.gemini."""
    peers = []
    base = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    if exe := shutil.which("ccusage"):
        env = {**base, "GEMINI_DATA_DIR": str(root)}
        peers.append(("ccusage", [exe, "gemini", "session", "--offline", "--json"], env, ""))
        if native := ccusage_native(exe):
            # The same run without the Node.js launcher that npm installs as `ccusage`: the binary alone.
            cmd = [str(native), "gemini", "session", "--offline", "--json"]
            note = "for reference; the target uses the row above"
            peers.append(("ccusage binary (no launcher)", cmd, env, note))
    if exe := shutil.which("tokscale"):
        env = {**base, "GEMINI_CLI_HOME": str(root.parent.parent)}  # a HOME-like folder holding .gemini/tmp
        probe = subprocess.run(
            [exe, "models", "--help"], capture_output=True, text=True, env=env, timeout=120
        )
        if "--group-by" in probe.stdout:
            cmd = [exe, "models", "--json", "-c", "gemini", "--group-by", "session,model"]
            peers.append(("tokscale", cmd, env, ""))
        else:  # releases before --group-by (2026-07) take --gemini and group per model only
            cmd = [exe, "models", "--json", "--gemini", "--no-spinner"]
            peers.append(("tokscale", cmd, env, "old tokscale without --group-by: per model only"))
    return peers


def ccusage_native(launcher: str) -> Path | None:
    """The native binary that ccusage's npm launcher (``src/cli.js``) runs: the optional dependency
    ``@ccusage/ccusage-<os>-<arch>`` installed beside it. None when the launcher is not that script."""
    script = Path(launcher).resolve()
    arches = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
    arch = arches.get(platform.machine().lower())
    system = {"linux": "linux", "darwin": "darwin"}.get(sys.platform)
    if script.name != "cli.js" or arch is None or system is None:
        return None
    package = script.parent.parent / "node_modules" / "@ccusage" / f"ccusage-{system}-{arch}"
    binary = package / "bin" / "ccusage"
    return binary if os.access(binary, os.X_OK) else None


def json_error(stdout: bytes) -> str | None:
    """Why a peer's stdout is not a usable JSON report (some exit 0 after printing {"error": ...})."""
    try:
        doc = orjson.loads(stdout)
    except orjson.JSONDecodeError:
        return f"output is not JSON: {_tail(stdout, 1)[:200]}"
    if isinstance(doc, dict) and "error" in doc:
        return f"reported an error: {str(doc['error'])[:200]}"
    return None


def _tail(data: bytes, lines: int = 3) -> str:
    text = data.decode(errors="replace").strip().splitlines()
    return " | ".join(text[-lines:]) if text else "no output"


def _home(name: str, root: Path, targets: Sequence[side_by_side.Target], rounds: int) -> side_by_side.Home:
    found = session_files(root)
    megabytes = sum(os.path.getsize(f) for f in found) / 1e6
    return side_by_side.Home(name, root, len(found), megabytes, targets, rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ctxtool speed/memory benchmark against an orjson floor")
    parser.add_argument("--repeat", type=int, default=3, help="runs per contender (best wall time is kept)")
    parser.add_argument(
        "--small-rounds", type=int, default=5, help="alternating rounds against ccusage on the 25 MB home"
    )
    parser.add_argument("--size-mb", type=int, default=500, help="corpus size to build or reuse")
    parser.add_argument("--no-peers", action="store_true", help="skip ccusage and tokscale")
    parser.add_argument("--floor-only", action="store_true", help="measure the orjson floor only")
    parser.add_argument(
        "--ctxtool", help="ctxtool executable to measure (default: the one beside this Python)"
    )
    parser.add_argument("--no-giant", action="store_true", help="skip the 1 GB and 200 MB file scenarios")
    parser.add_argument(
        "--peers-only",
        action="store_true",
        help="only the side-by-side rounds against ccusage (bench/peers.py)",
    )
    parser.add_argument(
        "--write-docs",
        "--write-readme",  # its former name, as the Makefile spells it
        dest="write_docs",
        action="store_true",
        help="put the ccusage comparison into the tables of docs/benchmarks.md",
    )
    parser.add_argument("--floor-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor_worker is not None:
        return floor_main(args.floor_worker)

    try:
        root = make_corpus.build(size_mb=args.size_mb)
        small = None if args.floor_only else make_corpus.build(out=SMALL_HOME, size_mb=1)
    except make_corpus.CorpusError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    files = session_files(root)
    largest = max(os.path.getsize(f) for f in files) / 1e6
    total = sum(os.path.getsize(f) for f in files) / 1e6
    cores = os.cpu_count() or 1
    print(
        f"corpus: {root} — {len(files)} files, {total:.0f} MB, largest file {largest:.1f} MB; {cores} cores"
    )
    print(
        f"each timing: best of {args.repeat} runs (min wall time, max memory); files are in the page cache\n"
    )

    measured = None if args.floor_only else args.ctxtool or ctxtool_exe()
    if measured is not None:
        print(f"ctxtool: {measured} ({byte_compile(measured)})")
    if measured is not None and not args.no_peers and small is not None:
        # A new user's view first: ctxtool and ccusage side by side on both homes, the small one first, in
        # alternating rounds (issue 25).
        homes = [
            _home("The 43 real sessions as a home (bench/home)", small, SMALL_TARGETS, args.small_rounds),
            _home("The bench corpus (bench/corpus)", root, LARGE_TARGETS, args.repeat),
        ]
        lines, figures = side_by_side.compare(measured, homes, measure)
        launcher, _ = side_by_side.install_ccusage()
        if launcher is not None:  # the rows below time it too, beside the floor and the binary alone
            os.environ["PATH"] = f"{launcher.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        print("\n".join(lines) + "\n")
        if args.write_docs and figures["ccusage"] is None:
            print("docs/benchmarks.md: tables left as they were (ccusage was not measured)\n")
        elif args.write_docs and side_by_side.write_benchmarks_doc(side_by_side.benchmarks_table(figures)):
            print("docs/benchmarks.md: performance tables written\n")
    if args.peers_only:
        return 0
    rows: list[tuple[str, Measure | None, str]] = []
    # The floor, ctxtool cold and the peers are timed in rounds, one run of each per round, so that a slow
    # spell of the machine (it happens on shared ones) weighs on all of them alike, not on one row's ratio.
    cold_cmd, cold_note = (None, "") if args.floor_only else ctxtool_command(root, measured)
    with (
        tempfile.TemporaryDirectory(prefix="bench-cold-") as cache,
        tempfile.TemporaryDirectory(prefix="bench-home-") as home,
    ):
        # --no-cache: no session index. Prices come from the rates shipped in the package (else the memo of
        # the day in this temporary cache dir); the "prices asked" row bypasses both and asks genai-prices,
        # as a run does after an upgrade of genai-prices that `make rates` has not followed yet.
        cold_env = {**os.environ, "CTXTOOL_CACHE_DIR": cache}
        peers = [] if (args.no_peers or args.floor_only) else peer_commands(root, Path(home))
        contenders: list[tuple[str, list[str], Mapping[str, str] | None]] = [
            ("floor", [sys.executable, __file__, "--floor-worker", str(root)], None)
        ]
        if cold_cmd is not None:
            contenders.append(("cold", cold_cmd, cold_env))
        contenders += [(name, cmd, env) for name, cmd, env, _ in peers]
        timed = in_rounds(args.repeat, contenders)
        first = None
        if cold_cmd is not None:
            no_memo = {**cold_env, "CTXTOOL_NO_PRICE_CACHE": "1"}
            first = best_of(args.repeat, cold_cmd, no_memo, PEER_TIMEOUT_S)

    floor = timed["floor"]
    if floor.returncode != 0:
        print(f"Error: the orjson floor failed: {_tail(floor.stderr)}", file=sys.stderr)
        return 1
    stats = orjson.loads(floor.stdout)
    rows.append(("floor (orjson, process pool)", floor, f"{stats['records']} records parsed"))

    cold: Measure | None = None
    if not args.floor_only:
        if cold_cmd is None:
            rows.append(("ctxtool stats cold", None, f"not measured: {cold_note}"))
        elif timed["cold"].returncode != 0:
            failed = timed["cold"]
            rows.append(("ctxtool stats cold", None, f"exit {failed.returncode}: {_tail(failed.stderr)}"))
        else:
            cold = timed["cold"]
            rows.append(
                ("ctxtool stats cold", cold, cold_note or "no session index; rates shipped in the package")
            )
            if first is not None and first.returncode == 0:
                note = "CTXTOOL_NO_PRICE_CACHE=1: loads genai-prices' data"
                rows.append(("ctxtool cold, prices asked", first, note))

    exe = measured
    verdicts: list[str] = []
    if cold is not None and exe is not None:
        index_rows, index_verdicts = scenarios.index_scenarios(exe, root, files, args.repeat, best_of)
        rows.extend(index_rows)
        verdicts.extend(index_verdicts)
        guard_rows, guard_verdicts = guard_bench.guard_scenarios(exe, args.repeat, best_of)
        rows.extend(guard_rows)
        verdicts.extend(guard_verdicts)
        if not args.no_giant:
            giant_rows, giant_verdicts = scenarios.giant_scenarios(exe, best_of)
            rows.extend(giant_rows)
            verdicts.extend(giant_verdicts)

    peer_rows: list[tuple[str, Measure | None, str]] = []
    for name, _, _, note in peers:
        m = timed[name]
        problem = json_error(m.stdout) if m.returncode == 0 else None
        if problem is not None and not m.stdout.strip():
            problem = f"no JSON on stdout; stderr: {_tail(m.stderr)[:300]}"
        if m.returncode != 0:
            peer_rows.append((name, None, f"exit {m.returncode}: {_tail(m.stderr or m.stdout)}"))
        elif problem is not None:
            peer_rows.append((name, None, problem))
        else:
            peer_rows.append((name, m, "; ".join(x for x in (note, f"{len(m.stdout)} B JSON") if x)))
    if not peers and not (args.no_peers or args.floor_only):
        peer_rows.append(("peers", None, "ccusage / tokscale not on PATH (see bench/README.md)"))

    print(f"{'name':<30} {'wall s':>8} {'tree MB':>8} {'max proc MB':>12} {'x floor':>8} {'x cold':>7}  note")
    for name, row, note in [*rows, *peer_rows]:
        if row is None:
            print(f"{name:<30} {'-':>8} {'-':>8} {'-':>12} {'-':>8} {'-':>7}  {note}")
            continue
        vs_cold = f"{row.wall / cold.wall:.2f}" if cold is not None else "-"
        print(
            f"{name:<30} {row.wall:>8.2f} {row.tree_mb:>8.0f} {row.proc_mb:>12.0f} "
            f"{row.wall / floor.wall:>8.2f} {vs_cold:>7}  {note}"
        )

    print("\ntargets:")
    if cold is None:
        why = "--floor-only" if args.floor_only else "ctxtool stats did not run"
        print(f"  cold <= 1.5x floor: not measured ({why})")
        print("  peak memory < 2x largest file + frames: not measured")
        return 0
    ratio = cold.wall / floor.wall
    verdict = "PASS" if ratio <= COLD_TARGET else "FAIL"
    print(f"  cold <= {COLD_TARGET}x floor: {ratio:.2f}x -> {verdict}")
    # The largest ctxtool process's peak above a bare interpreter that imported the same libraries, against
    # twice the largest file plus the frames ctxtool builds (their size measured in a separate process).
    frames = scenarios.frames_mb(root)
    budget = 2 * largest + frames
    imports = best_of(1, [sys.executable, "-c", "import orjson, polars, genai_prices, msgspec, ctxtool"])
    baseline = imports.proc_mb
    over = cold.proc_mb - baseline
    verdict = "PASS" if over < budget else "FAIL"
    print(
        f"  peak memory < 2x largest file + frames: largest ctxtool process {cold.proc_mb:.0f} MB = "
        f"{baseline:.0f} MB imports + {over:.0f} MB; 2x largest file + frames = {2 * largest:.0f} + "
        f"{frames:.0f} = {budget:.0f} MB -> {verdict}"
    )
    print(f"  (whole ctxtool process tree peaked at {cold.tree_mb:.0f} MB)")
    ccusage = next((m for name, m, _ in peer_rows if name == "ccusage" and m is not None), None)
    if ccusage is None:
        print(f"  cold <= {PEER_TARGET}x ccusage: not measured (ccusage not installed or failed)")
    else:
        ratio = cold.wall / ccusage.wall
        verdict = "PASS" if ratio <= PEER_TARGET else "FAIL"
        print(
            f"  cold <= {PEER_TARGET}x ccusage: {cold.wall:.2f} s / {ccusage.wall:.2f} s = {ratio:.2f}x "
            f"-> {verdict}"
        )
        binary = next((m for name, m, _ in peer_rows if name.startswith("ccusage binary") and m), None)
        if binary is not None:
            print(
                f"  (ccusage's binary without its launcher: {cold.wall:.2f} s / {binary.wall:.2f} s = "
                f"{cold.wall / binary.wall:.2f}x; for reference, not a target)"
            )
    for line in verdicts:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
