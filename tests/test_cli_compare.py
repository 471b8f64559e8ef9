"""``ctxtool compare`` and ``ctxtool compact --strategy`` as a user runs them: every output shape."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from ctxtool.cli import run
from ctxtool.session.read import read_session
from tests.test_compare import crafted

STRATS = "gemini-cli,kode,pi,openclaw,codex"


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "compare", str(crafted(tmp_path)), "--strategies", STRATS, "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema_version"] == 3
    assert doc["command"] == "compare"
    assert doc["strategies"] == STRATS.split(",")
    assert [r["strategy"] for r in doc["rows"]] == STRATS.split(",")
    assert all(isinstance(r["tokens_after"], int) for r in doc["rows"])


def test_csv_has_one_row_per_session_and_strategy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "compare", str(crafted(tmp_path)), "--strategies", "pi,codex", "-f", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["strategy"] for r in rows] == ["pi", "codex"]
    assert "retention" in rows[0]
    assert "reduction" in rows[0]


def test_table_bars_and_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = tmp_path / "c.svg"
    code, out, err = cli(
        capsys,
        "compare",
        str(crafted(tmp_path)),
        "--strategies",
        STRATS,
        "--chart",
        str(chart),
        "--width",
        "160",
    )
    assert code == 0, err
    assert "ctxtool compare" in out
    assert "openclaw" in out
    assert "per strategy" in out
    assert "█" in out
    assert chart.exists()
    assert "chart written" in err


def test_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(crafted(tmp_path))
    assert cli(capsys, "compare", path, "--strategies", "nope")[0] == 2
    assert cli(capsys, "compare", path, "-f", "parquet")[0] == 2
    assert cli(capsys, "compare", path, "--chart", str(tmp_path / "x.gif"))[0] == 2


@pytest.mark.parametrize("strategy", ["kode", "pi", "openclaw", "codex", "kode:balanced"])
def test_compact_with_strategy_writes_a_loadable_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], strategy: str
) -> None:
    out_dir = tmp_path / "elsewhere" / "out"
    code, out, err = cli(
        capsys,
        "compact",
        str(crafted(tmp_path / "in")),
        "--strategy",
        strategy,
        "--force",
        "-o",
        str(out_dir),
        "-f",
        "json",
    )
    assert code == 0, err
    (row,) = json.loads(out)["sessions"]
    assert row["strategy"] == strategy
    assert row["status"] == "COMPRESSED"
    assert set(row["strategy_tokens"]) == {"measure", "before", "after"}
    assert read_session(row["output_path"]).messages


def test_compact_help_lists_strategies_and_exactness(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "compact", "--list-profiles")
    assert code == 0
    assert "kode:aggressive" in out
    words = " ".join(out.split())
    assert "unused by Kode itself" in words
    assert "rebuilt from the transcript" in words
