"""bench/peers.py, the side-by-side rounds of ``make bench``: their order, medians, verdicts and the tables
of docs/benchmarks.md, with and without ccusage. The commands are not run: a stand-in for ``bench/run.py``'s
``measure`` answers each with set figures, so what is checked is the bookkeeping, never a speed."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import REPO


def _peers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_peers", REPO / "bench" / "peers.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


peers = _peers()
LAUNCHER = Path("/opt/ccusage/bin/ccusage")


@dataclass
class Measured:
    wall: float
    tree_mb: float
    proc_mb: float
    returncode: int = 0
    stdout: bytes = b""
    stderr: bytes = b""


class StandIn:
    """Answers each command with the figures of its kind; records the kinds in the order run."""

    def __init__(self, figures: dict[str, tuple[float, float, float]]) -> None:
        self.figures = figures
        self.order: list[str] = []
        self.caches: dict[str, int] = {}

    def kind(self, cmd: list[str], env: dict[str, str]) -> str:
        if cmd[0] == str(LAUNCHER):
            return "ccusage"
        if cmd[1:] == ["-c", "pass"]:
            return "python"
        if cmd[1:] == ["--help"]:
            return "help"
        if "--no-cache" in cmd:
            return "no-cache"
        seen = self.caches.get(env["CTXTOOL_CACHE_DIR"], 0)  # the runs over one cache folder, in turn
        self.caches[env["CTXTOOL_CACHE_DIR"]] = seen + 1
        return ("first", "second", "third")[seen]

    def __call__(self, cmd: list[str], env: dict[str, str], timeout: float) -> Measured:
        kind = self.kind(cmd, env)
        self.order.append(kind)
        wall, proc, tree = self.figures[kind]
        # a little spread over the rounds, so that the median is the middle round's
        spread = 1 + 0.1 * (sum(1 for k in self.order if k == kind) - 2)
        return Measured(wall * spread, tree * spread, proc * spread)


FIGURES = {
    "first": (0.50, 90.0, 100.0),
    "second": (0.10, 60.0, 60.0),
    "third": (0.05, 20.0, 20.0),
    "ccusage": (0.60, 80.0, 120.0),
    "no-cache": (0.70, 85.0, 95.0),
    "python": (0.02, 8.0, 1.0),  # over before the tree was sampled at its peak
    "help": (0.06, 20.0, 20.0),
}


def _home(tmp_path: Path, targets: Any, name: str = "small") -> Any:
    return peers.Home(name, tmp_path / name, 43, 25.0, targets, 3)


def test_rounds_alternate_and_each_target_is_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peers, "install_ccusage", lambda: (LAUNCHER, ""))
    monkeypatch.setattr(peers, "ccusage_version", lambda launcher: "ccusage 20.0.24")
    measure = StandIn(FIGURES)
    lines, figures = peers.compare("ctxtool", [_home(tmp_path, peers.SMALL_TARGETS)], measure)
    one_round = ["first", "second", "third", "ccusage", "no-cache", "python", "help"]
    assert measure.order == one_round * 3
    (home,) = figures["homes"]
    assert home["median"]["first"] == {"wall": 0.5, "proc": 90.0, "tree": 100.0}  # the middle round's
    assert home["median"]["python"]["tree"] == 8.0  # a tree is never below its largest process
    verdicts = {t["label"]: round(t["ratio"], 3) for t in home["targets"]}
    assert verdicts == {
        "first / ccusage": round(0.5 / 0.6, 3),
        "no-cache / ccusage": round(0.7 / 0.6, 3),
        "second / `ctxtool --help`": round(0.1 / 0.06, 3),  # the run right after the first, not the replay
        "first-run RSS, largest process / ccusage's": round(90 / 80, 3),
        "first-run RSS, process tree / ccusage's": round(100 / 120, 3),
    }
    text = "\n".join(lines)
    assert "first / ccusage <= 1.0x: 0.83x -> PASS" in text
    assert "no-cache / ccusage <= 1.0x: 1.17x -> FAIL" in text
    assert "floor: `python -c pass`" in text
    assert "floor: `ctxtool --help`" in text


def test_without_ccusage_the_rest_is_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peers, "install_ccusage", lambda: (None, "npm is not installed"))
    measure = StandIn(FIGURES)
    homes = [_home(tmp_path, peers.SMALL_TARGETS), _home(tmp_path, peers.LARGE_TARGETS, "large")]
    lines, figures = peers.compare("ctxtool", homes, measure)
    assert "ccusage" not in measure.order
    assert measure.order.count("first") == 6
    assert lines[0].startswith("ccusage: not measured (npm is not installed)")
    assert figures["ccusage"] is None
    small, large = figures["homes"]
    assert [t["ratio"] is None for t in small["targets"]] == [True, True, False, True, True]
    assert all(t["ratio"] is None for t in large["targets"])
    assert "second / `ctxtool --help` <= 2.0x: 1.67x -> PASS" in "\n".join(lines)
    table = peers.benchmarks_table(figures)
    assert "| first / ccusage <= 0.8x | — | not measured |" in table


def test_both_tables_go_between_the_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peers, "install_ccusage", lambda: (LAUNCHER, ""))
    monkeypatch.setattr(peers, "ccusage_version", lambda launcher: "ccusage 20.0.24")
    homes = [_home(tmp_path, peers.SMALL_TARGETS), _home(tmp_path, peers.LARGE_TARGETS, "large")]
    _, figures = peers.compare("ctxtool", homes, StandIn(FIGURES))
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"before\n{peers.START}\nold table\n{peers.END}\nafter\n", encoding="utf-8")
    assert peers.write_benchmarks_doc(peers.benchmarks_table(figures), doc)
    text = doc.read_text(encoding="utf-8")
    assert text.startswith(f"before\n{peers.START}\nMeasured by `make bench`")
    assert text.endswith(f"{peers.END}\nafter\n")
    assert "old table" not in text
    assert text.index("**small: 43 session files, 25 MB**") < text.index("**large: 43 session files, 25 MB**")
    assert "| first / ccusage <= 1.0x | 0.83x | yes |" in text
    assert "| first / ccusage <= 0.8x | 0.83x | no |" in text
    assert "| no-cache / ccusage <= 0.7x | 1.17x | no |" in text
    assert text.count("| first-run RSS, process tree / ccusage's <= 1.2x | 0.83x | yes |") == 2
    assert all(len(line) <= 120 for line in text.splitlines() if line.startswith("|"))


def test_the_tables_go_to_docs_benchmarks_md_not_the_readme(tmp_path: Path) -> None:
    """``make bench`` writes into docs/benchmarks.md, which holds the markers once; the README holds none."""
    assert peers.BENCHMARKS_DOC == REPO / "docs" / "benchmarks.md"
    doc = peers.BENCHMARKS_DOC.read_text(encoding="utf-8")
    assert doc.count(peers.START) == doc.count(peers.END) == 1
    assert doc.index(peers.START) < doc.index(peers.END)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert peers.START not in readme
    assert peers.END not in readme
    no_markers = tmp_path / "plain.md"
    no_markers.write_text("no markers here\n", encoding="utf-8")
    assert not peers.write_benchmarks_doc("| a |", no_markers)
    assert no_markers.read_text(encoding="utf-8") == "no markers here\n"
