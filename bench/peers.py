"""ctxtool against ccusage, side by side on two homes, as a new user meets them (``make bench``).

The two homes, the small one first: the 43 real sessions laid out once as a home (``bench/home``, 25 MB) and
the 500 MB corpus (``bench/corpus``), both built by ``bench/make_corpus.py``. ccusage is installed from npm by
this script (pinned, into a cache folder, reused), with its native binary for this platform; when it cannot be
installed the rounds run without it, and the ratios to it say "not measured". Each round runs, one after the
other, so that a slow spell of the machine weighs on all of them alike:

1. ctxtool's first run: an empty cache folder, the index on (what a new user's first ``ctxtool stats`` does);
2. ccusage (``ccusage gemini session --offline --json``, its npm launcher, as users run it);
3. ``ctxtool stats --no-cache``;
4. the second run, right after the first, over its cache: served from the index (it keeps its output);
5. the third run: it replays that output (``ctxtool.frames.replay``);
6. the start-up floor: ``python -c pass`` and ``ctxtool --help``.

Reported per home: the median of the rounds for each, wall time and peak RSS (of the largest process, and of
the whole process tree), the ratios the issue sets targets for, PASS or FAIL, and the machine.
``--write-docs`` (bench/run.py; ``--write-readme``, its former name, still works) puts both tables into
docs/benchmarks.md between the ``bench:peers`` markers.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CCUSAGE_VERSION = "20.0.24"  # 20.0.26 published no linux-x64 binary
# Where ``--write-docs`` puts the tables (the README points there).
BENCHMARKS_DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
START, END = "<!-- bench:peers:start -->", "<!-- bench:peers:end -->"

# What each row is (in the order a round runs them) and how docs/benchmarks.md names it.
RUNS = {
    "first": "ctxtool's first run (empty cache, index written)",
    "ccusage": "ccusage",
    "no-cache": "`ctxtool stats --no-cache`",
    "second": "second run (right after the first: served from the index)",
    "third": "third run (replayed)",
    "python": "floor: `python -c pass`",
    "help": "floor: `ctxtool --help`",
}


@dataclass(frozen=True)
class Target:
    """``numerator / denominator <= limit`` on wall time, or on peak RSS (``memory``: largest process
    ``proc`` or whole tree ``tree``)."""

    label: str
    numerator: str
    denominator: str
    limit: float
    memory: str = ""

    def ratio(self, med: Mapping[str, Mapping[str, float]]) -> float | None:
        if self.numerator not in med or self.denominator not in med:
            return None
        key = self.memory or "wall"
        return med[self.numerator][key] / med[self.denominator][key]


def _memory_targets() -> list[Target]:
    return [
        Target("first-run RSS, largest process / ccusage's", "first", "ccusage", 1.2, "proc"),
        Target("first-run RSS, process tree / ccusage's", "first", "ccusage", 1.2, "tree"),
    ]


# Issue 25's targets (2-core machine, medians of alternating rounds in one run).
SMALL_TARGETS = [
    Target("first / ccusage", "first", "ccusage", 1.0),
    Target("no-cache / ccusage", "no-cache", "ccusage", 1.0),
    Target("second / `ctxtool --help`", "second", "help", 2.0),
    *_memory_targets(),
]
LARGE_TARGETS = [
    Target("first / ccusage", "first", "ccusage", 0.8),
    Target("no-cache / ccusage", "no-cache", "ccusage", 0.7),
    *_memory_targets(),
]


@dataclass(frozen=True)
class Home:
    """A home to measure: its ``.gemini/tmp`` root, how the tables name it, its targets and rounds."""

    name: str
    root: Path
    files: int
    megabytes: float
    targets: Sequence[Target]
    rounds: int

    def describe(self) -> str:
        return f"{self.name}: {self.files} session files, {self.megabytes:.0f} MB"


def cache_folder() -> Path:
    base = os.environ.get("CTXTOOL_BENCH_CACHE") or os.path.join(Path.home(), ".cache", "ctxtool-bench")
    return Path(base) / f"ccusage-{CCUSAGE_VERSION}"


def install_ccusage() -> tuple[Path | None, str]:
    """The ``ccusage`` launcher of the pinned release (installed on first use), or None and why not."""
    folder = cache_folder()
    launcher = folder / "node_modules" / ".bin" / "ccusage"
    if launcher.exists() and _works(launcher):
        return launcher, ""
    npm = shutil.which("npm")
    if npm is None:
        return None, "npm is not installed: install Node.js 20+ with npm to compare with ccusage"
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )
    system = {"linux": "linux", "darwin": "darwin"}.get(sys.platform)
    packages = [f"ccusage@{CCUSAGE_VERSION}"]
    if arch and system:  # npm may leave the optional native package out; name it
        packages.append(f"@ccusage/ccusage-{system}-{arch}@{CCUSAGE_VERSION}")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(folder), *packages],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0 or not launcher.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-2:]
        return None, f"npm install {' '.join(packages)} failed: {' / '.join(tail)}"
    if not _works(launcher):
        return None, "ccusage was installed but does not run (its native binary is missing for this platform)"
    return launcher, ""


def ccusage_version(launcher: Path) -> str:
    return subprocess.run([str(launcher), "--version"], capture_output=True, text=True).stdout.strip()


def _works(launcher: Path) -> bool:
    try:
        done = subprocess.run([str(launcher), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def machine() -> str:
    """Cores and CPU model of this machine, for the table of docs/benchmarks.md."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{os.cpu_count()} cores, {model}, {system}, Python {platform.python_version()}"


def compare(
    exe: str,
    homes: Sequence[Home],
    measure: Callable[..., Any],
    *,
    timeout: float = 900,
) -> tuple[list[str], dict[str, Any]]:
    """Run the rounds on each home in turn; the printed lines and the figures (medians, ratios)."""
    launcher, why = install_ccusage()
    lines: list[str] = []
    version = None
    if launcher is None:
        lines.append(f"ccusage: not measured ({why}); ctxtool and the start-up floor are measured without it")
    else:
        version = ccusage_version(launcher)
    figures: dict[str, Any] = {"machine": machine(), "ccusage": version, "homes": []}
    lines.append(f"machine: {figures['machine']}")
    for home in homes:
        med = _rounds(exe, home, launcher, measure, timeout)
        checked = [
            {"label": t.label, "limit": t.limit, "ratio": t.ratio(med), "memory": bool(t.memory)}
            for t in home.targets
        ]
        figures["homes"].append(
            {"name": home.describe(), "rounds": home.rounds, "median": med, "targets": checked}
        )
        lines.append("")
        against = f"ctxtool vs {version} (npm launcher)" if version else "ctxtool (no ccusage)"
        lines.append(f"{home.describe()}: {against}, medians of {_rounds_text(home.rounds)}")
        lines.append(f"  {'run':<58} {'wall s':>7} {'largest MB':>11} {'tree MB':>8}")
        for key, label in RUNS.items():
            if key in med:
                m = med[key]
                lines.append(f"  {label:<58} {m['wall']:>7.3f} {m['proc']:>11.0f} {m['tree']:>8.0f}")
        for target in checked:
            lines.append(f"  {_verdict_line(target)}")
    return lines, figures


def _rounds_text(rounds: int) -> str:
    return "1 round" if rounds == 1 else f"{rounds} alternating rounds"


def _verdict_line(target: Mapping[str, Any]) -> str:
    head = f"{target['label']} <= {target['limit']}x"
    if target["ratio"] is None:
        return f"{head}: not measured (no ccusage)"
    verdict = "PASS" if target["ratio"] <= target["limit"] else "FAIL"
    return f"{head}: {target['ratio']:.2f}x -> {verdict}"


def _rounds(
    exe: str, home: Home, launcher: Path | None, measure: Callable[..., Any], timeout: float
) -> dict[str, dict[str, float]]:
    """Each run's medians over ``home.rounds`` alternating rounds: wall s, largest process and tree MB."""
    runs: dict[str, list[Any]] = {}

    def add(name: str, m: Any) -> None:
        if m.returncode != 0:
            raise RuntimeError(
                f"{name} failed (exit {m.returncode}): {m.stderr.decode(errors='replace')[-300:]}"
            )
        runs.setdefault(name, []).append(m)

    stats = [exe, "stats", str(home.root), "--by", "session", "--format", "json"]
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        peer_home = Path(tmp) / "home"
        peer_home.mkdir()
        peer_env = {**os.environ, "HOME": str(peer_home), "XDG_CACHE_HOME": str(peer_home / ".cache"),
                    "GEMINI_DATA_DIR": str(home.root)}  # fmt: skip
        for r in range(home.rounds):
            env: Mapping[str, str] = {**os.environ, "CTXTOOL_CACHE_DIR": str(Path(tmp) / f"cache-{r}")}
            add("first", measure(stats, env, timeout))
            add("second", measure(stats, env, timeout))  # the run right after the first: the index answers
            add("third", measure(stats, env, timeout))  # and the one after that replays
            if launcher is not None:
                ccusage = [str(launcher), "gemini", "session", "--offline", "--json"]
                add("ccusage", measure(ccusage, peer_env, timeout))
            add("no-cache", measure([*stats, "--no-cache"], env, timeout))
            add("python", measure([sys.executable, "-c", "pass"], env, timeout))
            add("help", measure([exe, "--help"], env, timeout))
    return {
        name: {
            "wall": statistics.median(m.wall for m in ms),
            "proc": statistics.median(m.proc_mb for m in ms),
            # sampled every 50 ms, the tree can miss a short run's peak; it is never below its largest process
            "tree": statistics.median(max(m.tree_mb, m.proc_mb) for m in ms),
        }
        for name, ms in runs.items()
    }


def benchmarks_table(figures: Mapping[str, Any]) -> str:
    """The tables of docs/benchmarks.md (one per home), from one run's figures."""
    rows = [
        f"Measured by `make bench` on {figures['machine']}, against {figures['ccusage']} (`ccusage gemini "
        "session --offline --json`, its npm launcher); per home, medians of alternating rounds "
        "(bench/peers.py); peak RSS of the largest process and of the whole process tree."
    ]
    for home in figures["homes"]:
        med = home["median"]
        rows += ["", f"**{home['name']}** ({_rounds_text(home['rounds'])})", ""]
        rows += ["| run | wall s | largest process MB | process tree MB |", "|---|---:|---:|---:|"]
        for key, label in RUNS.items():
            if key in med:
                m = med[key]
                rows.append(f"| {label} | {m['wall']:.2f} | {m['proc']:.0f} | {m['tree']:.0f} |")
        rows += ["", "| target | ratio | met |", "|---|---:|---|"]
        for target in home["targets"]:
            ratio = target["ratio"]
            if ratio is None:
                rows.append(f"| {target['label']} <= {target['limit']}x | — | not measured |")
            else:
                met = "yes" if ratio <= target["limit"] else "no"
                rows.append(f"| {target['label']} <= {target['limit']}x | {ratio:.2f}x | {met} |")
    return "\n".join(rows)


def write_benchmarks_doc(table: str, doc: Path = BENCHMARKS_DOC) -> bool:
    """Put ``table`` between the markers of ``doc``; False, and nothing written, when it has no markers."""
    text = doc.read_text(encoding="utf-8")
    if START not in text or END not in text:
        return False
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{START}\n{table}\n{END}{tail}", encoding="utf-8")
    return True


def dump(figures: Mapping[str, Any]) -> str:
    return json.dumps(figures, indent=2)
