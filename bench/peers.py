"""ctxtool against ccusage, side by side, as a new user meets them (``make bench``, issue 16).

ccusage is installed from npm by this script (pinned, into a cache folder, reused), with its native binary
for this platform. Each round runs, one after the other, so that a slow spell of the machine weighs on all of
them alike:

1. ctxtool's first run: an empty cache folder, the index on (what a new user's first ``ctxtool stats`` does);
2. ccusage (``ccusage gemini session --offline --json``, its npm launcher, as users run it);
3. ``ctxtool stats --no-cache``;
4. two warm re-runs over the cache of (1): the second run after the first is served from the index and keeps
   its output; every later one replays it (``ctxtool.frames.replay``). The later one is the warm figure;
5. ``ctxtool stats --help``, the start-up every run pays.

Reported: the median of the rounds for each, wall time and the peak RSS of the whole process tree, the ratios
the issue sets targets for, and the machine. ``--write-readme`` puts the table into README.md between the
``bench:peers`` markers.
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
from pathlib import Path
from typing import Any

CCUSAGE_VERSION = "20.0.24"  # 20.0.26 published no linux-x64 binary
FIRST_TARGET = 0.6  # first run <= 0.6x ccusage
NO_CACHE_TARGET = 0.5  # --no-cache <= 0.5x ccusage
WARM_TARGET = 2.0  # warm <= 2x start-up
RSS_TARGET = 1.2  # first run's peak RSS <= 1.2x ccusage's
README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- bench:peers:start -->", "<!-- bench:peers:end -->"


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


def _works(launcher: Path) -> bool:
    try:
        done = subprocess.run([str(launcher), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def machine() -> str:
    """Cores and CPU model of this machine, for the README's table."""
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
    root: Path,
    rounds: int,
    measure: Callable[..., Any],
    *,
    timeout: float = 900,
) -> tuple[list[str], dict[str, Any]]:
    """Run the rounds; the printed lines and the figures (medians) by name."""
    launcher, why = install_ccusage()
    lines: list[str] = []
    if launcher is None:
        return [f"ccusage: not measured ({why})"], {}
    version = subprocess.run([str(launcher), "--version"], capture_output=True, text=True).stdout.strip()
    runs: dict[str, list[Any]] = {}

    def add(name: str, m: Any) -> None:
        if m.returncode != 0:
            raise RuntimeError(
                f"{name} failed (exit {m.returncode}): {m.stderr.decode(errors='replace')[-300:]}"
            )
        runs.setdefault(name, []).append(m)

    stats = [exe, "stats", str(root), "--by", "session", "--format", "json"]
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        peer_env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
                    "GEMINI_DATA_DIR": str(root)}  # fmt: skip
        for r in range(rounds):
            cache = Path(tmp) / f"cache-{r}"
            env: Mapping[str, str] = {**os.environ, "CTXTOOL_CACHE_DIR": str(cache)}
            add("first", measure(stats, env, timeout))
            add(
                "ccusage",
                measure([str(launcher), "gemini", "session", "--offline", "--json"], peer_env, timeout),
            )
            add("no-cache", measure([*stats, "--no-cache"], env, timeout))
            add("warm (index)", measure(stats, env, timeout))
            add("warm", measure(stats, env, timeout))
            add("start-up", measure([exe, "stats", "--help"], env, timeout))
    med = {name: _median(ms) for name, ms in runs.items()}
    ccusage = med["ccusage"]
    figures = {
        "machine": machine(),
        "ccusage": version,
        "rounds": rounds,
        "wall": {k: v[0] for k, v in med.items()},
        "rss": {k: v[1] for k, v in med.items()},
        "ratios": {
            "first / ccusage": med["first"][0] / ccusage[0],
            "no-cache / ccusage": med["no-cache"][0] / ccusage[0],
            "warm / start-up": med["warm"][0] / med["start-up"][0],
            "first-run RSS / ccusage RSS": med["first"][1] / ccusage[1],
        },
    }
    lines.append(f"ctxtool vs {version} (npm launcher), medians of {rounds} alternating rounds")
    lines.append(f"machine: {figures['machine']}")
    lines.append(f"{'run':<16} {'wall s':>7} {'peak RSS MB':>12}")
    for name, (wall, rss) in med.items():
        lines.append(f"{name:<16} {wall:>7.2f} {rss:>12.0f}")
    targets = {
        "first / ccusage": FIRST_TARGET,
        "no-cache / ccusage": NO_CACHE_TARGET,
        "warm / start-up": WARM_TARGET,
        "first-run RSS / ccusage RSS": RSS_TARGET,
    }
    for name, ratio in figures["ratios"].items():
        verdict = "PASS" if ratio <= targets[name] else "FAIL"
        lines.append(f"  {name}: {ratio:.2f}x (target <= {targets[name]}x) -> {verdict}")
    figures["targets"] = targets
    return lines, figures


def _median(ms: Sequence[Any]) -> tuple[float, float]:
    return statistics.median(m.wall for m in ms), statistics.median(m.tree_mb for m in ms)


def readme_table(figures: Mapping[str, Any], corpus: str) -> str:
    """The README's performance table, from one run's figures."""
    wall, rss, ratios, targets = figures["wall"], figures["rss"], figures["ratios"], figures["targets"]
    rows = [
        f"Measured by `make bench` on {figures['machine']}, against {figures['ccusage']} (`ccusage "
        f"gemini session --offline --json`, its npm launcher), on {corpus}; medians of {figures['rounds']} "
        "alternating rounds, peak RSS of the whole process tree.",
        "",
        "| run | wall s | peak RSS MB |",
        "|---|---:|---:|",
    ]
    names = {
        "first": "ctxtool's first run (empty cache, index written)",
        "ccusage": "ccusage",
        "no-cache": "`ctxtool stats --no-cache`",
        "warm (index)": "second run (served from the index)",
        "warm": "warm re-run (replayed)",
        "start-up": "`ctxtool stats --help`",
    }
    for key, label in names.items():
        rows.append(f"| {label} | {wall[key]:.2f} | {rss[key]:.0f} |")
    rows += ["", "| target | ratio | met |", "|---|---:|---|"]
    for name, ratio in ratios.items():
        rows.append(
            f"| {name} <= {targets[name]}x | {ratio:.2f}x | {'yes' if ratio <= targets[name] else 'no'} |"
        )
    return "\n".join(rows)


def write_readme(table: str, readme: Path = README) -> bool:
    text = readme.read_text(encoding="utf-8")
    if START not in text or END not in text:
        return False
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{table}\n{END}{tail}", encoding="utf-8")
    return True


def dump(figures: Mapping[str, Any]) -> str:
    return json.dumps(figures, indent=2)
