"""Conventions every command shares: the bare overview and the exit status of a PATH that names nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ctxtool.cli import run
from tests.conftest import FIXTURES


def test_bare_ctxtool_prints_an_overview_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(FIXTURES / "gemini", tmp_path / ".gemini")
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    assert run([]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    # The bundled data root holds 16 session files (subagents and a .json/.jsonl pair included), 3 projects.
    assert f"Looks in {tmp_path / '.gemini' / 'tmp'}:\n  16 session file(s) in 3 project(s).\n" in out
    assert "ctxtool stats" in out
    assert "ctxtool audit" in out
    assert "Exit status: 0 ok;" in out
    assert max(len(line) for line in out.splitlines() if not line.startswith("Looks in")) <= 80


def test_bare_ctxtool_without_sessions_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    assert run([]) == 0
    assert f"Looks in {tmp_path / '.gemini' / 'tmp'}:\n  not there yet" in capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_an_explicit_path_that_matches_nothing_is_an_error(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["stats", str(tmp_path / "nope"), "--format", fmt, "--no-cache"]) == 1
    assert "Error: " in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert run(["stats", str(tmp_path / "empty"), "--format", fmt, "--no-cache"]) == 1
    assert "Error: no session in" in capsys.readouterr().err
    # The rest of a batch is still reported, and the exit status still says one PATH was wrong.
    assert (
        run(["stats", str(FIXTURES / "gemini"), str(tmp_path / "nope"), "--format", fmt, "--no-cache"]) == 1
    )
    out, err = capsys.readouterr()
    assert "c4e5f6a7" in out
    assert f"Error: {tmp_path / 'nope'}: matches no session file" in err


def test_exit_statuses_are_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Exit status: 0 ok; 1 an error" in out
    assert "3 a budget exceeded (audit)" in out
