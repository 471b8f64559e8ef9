"""`ctxtool diff` as a user runs it: formats, --exit-code, errors."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ctxtool.cli import run
from tests.conftest import FIXTURES, write_jsonl
from tests.test_diff import HEADER, SNAPSHOT, compacted_messages, original_messages

ONE = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"


def diff(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[int, str, str]:
    code = run(["diff", *args])
    captured = capsysbinary.readouterr()
    return code, captured.out.decode(), captured.err.decode()


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    original = original_messages()
    before = write_jsonl(tmp_path / "before.jsonl", [HEADER, *original])
    after = write_jsonl(tmp_path / "after.jsonl", [HEADER, *compacted_messages(original)])
    return str(before), str(after)


def test_same_session_exit_code_0(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = diff(capsysbinary, str(ONE), str(ONE), "--exit-code", "-f", "json")
    assert code == 0
    doc = orjson.loads(out)
    assert doc["differs"] is False
    assert doc["counts"] == {"removed": 0, "kept": 7, "changed": 0, "added": 0}


def test_different_sessions_exit_code_1_only_when_asked(
    capsysbinary: pytest.CaptureFixture[bytes], files: tuple[str, str]
) -> None:
    code, _, _ = diff(capsysbinary, *files, "-f", "json")
    assert code == 0
    code, out, _ = diff(capsysbinary, *files, "--exit-code", "-f", "json")
    assert code == 1
    doc = orjson.loads(out)
    assert doc["schema_version"] == 3
    assert [m["status"] for m in doc["messages"]].count("removed") == 3
    assert doc["snapshots"] == [SNAPSHOT]
    assert doc["retention"]["paths"]["lost"] == ["tests/legacy_test.py", "docs/notes/design.md"]


def test_table_at_fixed_width(capsysbinary: pytest.CaptureFixture[bytes], files: tuple[str, str]) -> None:
    code, out, _ = diff(capsysbinary, *files, "--width", "90", "--color", "never")
    assert code == 0
    lines = out.splitlines()
    assert "\x1b[" not in out
    assert lines[1] == "3 removed, 2 kept, 1 changed, 2 added; the sessions differ."
    # Tables fit the width; the file paths on the first line and the snapshot text are never cut.
    table_lines = [line for line in lines if line.startswith(("│", "┃", "┏", "┡", "└"))]
    assert table_lines
    assert max(len(line) for line in table_lines) <= 90
    assert "<overall_goal>Fix the failing test in src/app.py.</overall_goal>" in out  # the snapshot in full
    assert "    lost: docs/notes/design.md" in lines
    rows = [line for line in lines if line.startswith("│ removed") or line.startswith("│ changed")]
    assert len(rows) == 4
    assert any("grep_search output truncated" in r or "…" in r for r in rows)
    assert all(len(r) <= 90 for r in rows)


def test_markdown_to_a_file(
    capsysbinary: pytest.CaptureFixture[bytes], files: tuple[str, str], tmp_path: Path
) -> None:
    target = tmp_path / "diff.md"
    code, out, _ = diff(capsysbinary, *files, "-f", "markdown", "-o", str(target))
    assert code == 0
    assert out == ""
    text = target.read_text()
    assert text.startswith("## ctxtool diff: sessions differ\n")
    assert "| removed | 0 |  | user |" in text


def test_errors(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    code, _, err = diff(capsysbinary, str(ONE), str(tmp_path / "missing.jsonl"))
    assert code == 1
    assert "missing.jsonl: cannot be read" in err
    code, _, err = diff(capsysbinary, str(ONE), str(ONE), "-f", "csv")
    assert code == 2
    assert "--format 'csv' is not supported by diff" in err
    code, _, _ = diff(capsysbinary, str(ONE))
    assert code == 2


@pytest.mark.parametrize("width", [40, 60])
def test_the_counts_line_wraps_to_the_width(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, width: int
) -> None:
    """The one-line summary (``226 removed, 53 kept, …``) goes onto more lines where the width is too narrow,
    breaking after a comma, never inside a count."""
    original = original_messages()
    many = [{**m, "id": f"{m['id']}-{i}"} for i in range(30) for m in original]  # counts of three digits
    before = write_jsonl(tmp_path / "before.jsonl", [HEADER, *many])
    after = write_jsonl(tmp_path / "after.jsonl", [HEADER, *compacted_messages(many)])
    code, out, _ = diff(capsysbinary, str(before), str(after), "--width", str(width), "--color", "never")
    assert code == 0
    lines = out.splitlines()
    counts = lines[1 : next(i for i, line in enumerate(lines) if line.startswith("Tokens"))]
    assert len(counts) == 2
    assert all(len(line) <= width for line in counts)
    assert " ".join(counts).endswith("added; the sessions differ.")
    assert all(line.split()[-1].endswith((",", ".")) for line in counts)
