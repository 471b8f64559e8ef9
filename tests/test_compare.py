"""``compare_sessions`` rows, per-strategy means and the chart file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ctxtool import compare
from ctxtool.common.errors import UsageError
from ctxtool.compress.summarize.offline import OfflineSummarizer
from ctxtool.session.write import session_bytes
from tests.test_strategy_pi import call, gemini, user


def crafted(tmp_path: Path) -> Path:
    msgs = [
        user(1, "Edit /work/app/main.py and never touch tests."),
        gemini(
            1,
            "",
            [call("c1", "run_shell_command", {"command": "pytest -q"}, "Exit Code: 1\nFAILED x")],
            total=1000,
        ),
        gemini(
            2,
            "",
            [call("c2", "read_file", {"file_path": "/work/app/main.py"}, "print(1)\n" * 2000)],
            total=5000,
        ),
        user(2, "now refactor"),
        gemini(3, "done", total=190_000),
    ]
    path = tmp_path / "chats" / "session-2026-01-01T00-00-abcdef01.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(
        session_bytes("jsonl", {"sessionId": "abcdef01-x", "projectHash": "p", "startTime": "t"}, msgs)
    )
    return path


def test_rows_per_session_and_strategy(tmp_path: Path) -> None:
    path = crafted(tmp_path)
    names = ["gemini-cli", "kode", "pi", "openclaw", "codex", "kode:aggressive"]
    rows = compare.compare_sessions([path], names, OfflineSummarizer(), keep_dir=tmp_path / "keep")
    assert [r["strategy"] for r in rows] == names
    for row in rows:
        assert set(row) == set(compare.COLUMNS)
        assert row["tokens_before"] > 0
        assert row["tokens_after"] is not None
        assert row["seconds"] >= 0
    by = {r["strategy"]: r for r in rows}
    assert by["kode"]["would_trigger"] is True
    assert by["kode"]["trigger_turn"] == 2
    assert by["pi"]["would_trigger"] is False
    assert by["kode:aggressive"]["would_trigger"] is None
    assert by["kode"]["status"] == "COMPRESSED"
    assert Path(by["kode"]["output_path"]).exists()
    assert by["codex"]["messages_kept"] == 2
    assert by["kode"]["paths_total"] >= 1
    assert by["kode"]["commands_total"] == 1
    assert by["gemini-cli"]["own_measure"].startswith("gemini-cli")
    means = compare.strategy_means(rows)
    assert [m["strategy"] for m in means] == names


def test_progress_advances_once_per_session_even_when_one_fails(tmp_path: Path) -> None:
    good = crafted(tmp_path)
    broken = tmp_path / "chats" / "session-2026-01-02T00-00-deadbeef.json"
    broken.write_text("{ not json", encoding="utf-8")
    seen: list[str] = []
    rows = compare.compare_sessions([broken, good], ["kode", "pi"], OfflineSummarizer(), advance=seen.append)
    assert seen == [broken.name, good.name]
    assert [r["status"] for r in rows][:2] == ["FAILED", "FAILED"]


def test_unknown_strategy_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown compaction strategy"):
        compare.parse_strategies("pi,claude")
    assert compare.parse_strategies(" pi , codex,pi") == ["pi", "codex"]


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_chart_file(tmp_path: Path, suffix: str) -> None:
    rows = compare.compare_sessions([crafted(tmp_path)], ["pi", "codex"], OfflineSummarizer())
    out = compare.write_chart(rows, tmp_path / f"chart{suffix}")
    head = out.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in out.read_bytes()[:2000]
    with pytest.raises(UsageError):
        compare.write_chart(rows, tmp_path / "chart.gif")


def test_a_failed_strategy_row_rounds_its_seconds_as_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxtool.common.errors import CtxtoolError

    def fails(*_: object) -> None:
        time.sleep(0.00123456)
        raise CtxtoolError("cannot compact", "a fix")

    monkeypatch.setattr(compare, "compact_session", fails)
    rows = compare.compare_sessions([crafted(tmp_path)], ["pi"], OfflineSummarizer())
    [row] = [r for r in rows if r["status"] == "FAILED"]
    assert row["error"].startswith("cannot compact")
    assert row["seconds"] == round(row["seconds"], 4) > 0
