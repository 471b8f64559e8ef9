"""What a user sees: every command's table output on the bundled fixtures, checked against reviewed snapshots.

Each command runs three ways: on an 80-column terminal, on a 120-column terminal, and piped (no COLUMNS, so
rich falls back to 80 columns, as in a CI log), always with NO_COLOR. The snapshots live in
tests/__snapshots__/test_snapshots.ambr; a change in what users see shows up there as a reviewed diff
(`pytest tests/test_snapshots.py --snapshot-update` rewrites them).

The fixtures are copied into the test's temporary directory, which is also the working directory, so every
path the output shows is relative and the same on every machine.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from ctxtool.cli import run
from tests.conftest import FIXTURES

MODES = {"80": "80", "120": "120", "piped": None}
ONE = "gemini/tmp/ctxdemo/chats/session-2026-05-25T09-30-c4e5f6a7.jsonl"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(FIXTURES / "gemini", tmp_path / "gemini")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXTOOL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _run(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    workdir: Path,
    mode: str,
    *args: str,
) -> str:
    columns = MODES[mode]
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    capsys.readouterr()
    code = run(list(args))
    out, err = capsys.readouterr()
    text = f"$ ctxtool {' '.join(args)}\n[exit {code}]\n--- stdout\n{out}--- stderr\n{err}"
    text = text.replace(str(workdir.resolve()), "<tmp>").replace(str(workdir), "<tmp>")
    # The time a strategy took is the one figure that changes from run to run; keep its width.
    return re.sub(r"\b\d+\.\d\ds\b", lambda m: re.sub(r"\d", "9", m.group()), text)


def _check(text: str, mode: str) -> None:
    width = 80 if MODES[mode] is None else int(mode)
    stdout = text.split("--- stdout\n", 1)[1].split("--- stderr\n", 1)[0]
    for line in stdout.splitlines():
        assert len(line) <= width, f"wider than {width} columns: {line!r}"


STATS = {
    "session": ("stats", "gemini", "--by", "session"),
    "turn": ("stats", "gemini", "--by", "turn"),
    "request": ("stats", "gemini", "--by", "request"),
    "model": ("stats", "gemini", "--by", "model"),
    "project": ("stats", "gemini", "--by", "project"),
    "day": ("stats", "gemini", "--by", "day"),
    "one-session": ("stats", ONE),
    "limit": ("stats", "gemini", "--sort", "total", "--desc", "--limit", "3"),
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("report", list(STATS))
def test_stats(
    report: str,
    mode: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    snapshot: SnapshotAssertion,
) -> None:
    text = _run(capsys, monkeypatch, workdir, mode, *STATS[report])
    _check(text, mode)
    assert text == snapshot


@pytest.mark.parametrize("mode", list(MODES))
def test_compact_dry_run(
    mode: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    snapshot: SnapshotAssertion,
) -> None:
    text = _run(
        capsys, monkeypatch, workdir, mode, "compact", "gemini/tmp/ctxdemo/chats", "--dry-run", "--force"
    )
    _check(text, mode)
    assert text == snapshot


@pytest.mark.parametrize("mode", list(MODES))
def test_compare(
    mode: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    snapshot: SnapshotAssertion,
) -> None:
    text = _run(capsys, monkeypatch, workdir, mode, "compare", ONE)
    _check(text, mode)
    assert text == snapshot


@pytest.mark.parametrize("mode", list(MODES))
def test_diff(
    mode: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    snapshot: SnapshotAssertion,
) -> None:
    assert run(["compact", ONE, "--force", "--out", "small.jsonl"]) == 0
    text = _run(capsys, monkeypatch, workdir, mode, "diff", ONE, "small.jsonl")
    _check(text, mode)
    assert text == snapshot


@pytest.mark.parametrize("mode", list(MODES))
def test_audit(
    mode: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    snapshot: SnapshotAssertion,
) -> None:
    text = _run(
        capsys,
        monkeypatch,
        workdir,
        mode,
        "audit",
        "gemini",
        "--no-config",
        "--max-session-tokens",
        "40k",
        "--max-context-share",
        "10%",
        "--min-cache-ratio",
        "30%",
    )
    _check(text, mode)
    assert text == snapshot
