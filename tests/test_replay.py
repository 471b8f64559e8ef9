"""A warm ``ctxtool stats`` replays the last warm run's output without loading polars, never a stale one.

These run the ``ctxtool`` console script itself (the replay sits before the CLI is imported), each with its
own cache folder and a copy of the fixtures.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

CTXTOOL = os.path.join(os.path.dirname(sys.executable), "ctxtool")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / "gemini" / "tmp", tmp_path / "data" / "tmp")
    return tmp_path


def stats(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "CTXTOOL_NO_REPLAY"}
    full_env.update(
        {"CTXTOOL_CACHE_DIR": str(home / "cache"), "COLUMNS": "100", "NO_COLOR": "1", **(env or {})}
    )
    return subprocess.run(
        [sys.executable, "-X", "importtime", CTXTOOL, "stats", str(home / "data" / "tmp"), *args],
        capture_output=True, text=True, env=full_env, timeout=120, check=False,
    )  # fmt: skip


def _output(run: subprocess.CompletedProcess[str]) -> tuple[int, str, str]:
    """Exit status, stdout and stderr without the import-time lines of ``-X importtime``."""
    err = "".join(
        line for line in run.stderr.splitlines(keepends=True) if not line.startswith("import time:")
    )
    return run.returncode, run.stdout, err


def _computed(run: subprocess.CompletedProcess[str]) -> bool:
    """Whether the run computed its report (a replayed one imports neither typer nor polars)."""
    return any(line.startswith("import time:") and "typer" in line for line in run.stderr.splitlines())


def _imported_polars(run: subprocess.CompletedProcess[str]) -> bool:
    return any(line.startswith("import time:") and "polars" in line for line in run.stderr.splitlines())


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_a_warm_run_is_replayed_exactly_without_polars(home: Path, fmt: str) -> None:
    """A table or JSON is made without polars, and its first run keeps what the second prints: the second
    is replayed."""
    first = stats(home, "-f", fmt)  # reads everything, writes the index
    second = stats(home, "-f", fmt)
    replayed = stats(home, "-f", fmt)
    assert _computed(first)
    assert _imported_polars(first) == (fmt == "csv")
    assert not _computed(second)
    assert not _computed(replayed)
    assert not _imported_polars(replayed)
    assert _output(replayed) == _output(second)
    assert _output(replayed)[0] == 0
    # The same run without the replay prints the same bytes.
    assert _output(stats(home, "-f", fmt, env={"CTXTOOL_NO_REPLAY": "1"})) == _output(replayed)


def test_a_changed_session_is_never_replayed(home: Path) -> None:
    stats(home, "-f", "json")
    stats(home, "-f", "json")
    before = stats(home, "-f", "json")
    assert not _computed(before)
    session = next((home / "data" / "tmp").rglob("session-2026-05-25T09-30-c4e5f6a7.jsonl"))
    line = (
        '{"id":"zz-1","timestamp":"2026-05-25T10:00:00.000Z","type":"gemini","content":[{"text":"more"}],'
        '"model":"gemini-2.5-pro","tokens":{"input":1000,"output":10,"cached":0,"thoughts":0,"tool":0,'
        '"total":1010}}\n'
    )
    with open(session, "a", encoding="utf-8") as fh:
        fh.write(line)
    after = stats(home, "-f", "json")
    assert _computed(after)
    assert after.stdout != before.stdout
    new_file = session.parent / "session-2026-05-26T09-30-feedf00d.jsonl"
    shutil.copy(session, new_file)
    stats(home, "-f", "json")
    with_new = stats(home, "-f", "json")
    assert "feedf00d" in with_new.stdout


def test_other_options_or_terminal_settings_are_not_replayed(home: Path) -> None:
    stats(home)
    stats(home)
    assert not _computed(stats(home))
    wider = stats(home, env={"COLUMNS": "140"})
    assert _computed(wider)
    by_day = stats(home, "--by", "day")
    assert _computed(by_day)


@pytest.mark.parametrize("args", [["--no-cache"], ["--output", "OUT.csv"]])
def test_no_cache_and_output_are_never_replayed(home: Path, args: list[str]) -> None:
    resolved = [str(home / a) if a == "OUT.csv" else a for a in args]
    for _ in range(3):
        run = stats(home, *resolved)
        assert _computed(run)
        assert run.returncode == 0
    assert not (home / "cache" / "replay").exists() or not any((home / "cache" / "replay").iterdir())
