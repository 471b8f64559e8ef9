"""`ctxtool stats` as a user runs it: formats, exit statuses, streams, defaults."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import polars as pl
import pytest

from ctxtool.cli import run
from tests.conftest import FIXTURES, write_jsonl

DATA = FIXTURES / "gemini" / "tmp"
ONE = DATA / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"


def stats(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[int, bytes, str]:
    code = run(["stats", *args])
    captured = capsysbinary.readouterr()
    return code, captured.out, captured.err.decode()


def test_json_envelope_and_rows(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, err = stats(capsysbinary, str(DATA), "--format", "json")
    assert code == 0
    doc = orjson.loads(out)
    assert doc["schema_version"] == 3
    assert doc["by"] == "session"
    assert doc["view"] == "billed"
    assert doc["read"]["files"] == 16
    assert {s["reason"] for s in doc["read"]["skipped"]} == {
        "temporary file",
        "unreadable-file backup left by Gemini CLI",
    }
    # Subagents roll up into their parent; an orphan subagent stays a row of its own.
    assert len(doc["rows"]) == doc["read"]["sessions"] - 1
    assert sum(r["total"] for r in doc["rows"]) == doc["read"]["total_tokens"]
    assert "broken line" in err  # the fixture with a truncated line is reported, on stderr only


def test_one_session_defaults_to_turns(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = stats(capsysbinary, str(ONE), "-f", "json")
    doc = orjson.loads(out)
    assert code == 0
    assert doc["by"] == "turn"
    assert [r["turn"] for r in doc["rows"]] == [1, 2, 3]


@pytest.mark.parametrize("by", ["turn", "request", "session", "model", "project", "day"])
def test_every_report_in_every_format(
    capsysbinary: pytest.CaptureFixture[bytes], by: str, tmp_path: Path
) -> None:
    code, out, _ = stats(capsysbinary, str(DATA), "--by", by, "-f", "json")
    rows = orjson.loads(out)["rows"]
    assert code == 0
    assert rows
    code, out, _ = stats(capsysbinary, str(DATA), "--by", by, "-f", "jsonl")
    assert [orjson.loads(line) for line in out.splitlines()] == rows
    code, out, _ = stats(capsysbinary, str(DATA), "--by", by, "-f", "csv")
    assert pl.read_csv(io.BytesIO(out)).height == len(rows)
    target = tmp_path / "out.parquet"
    code, out, _ = stats(capsysbinary, str(DATA), "--by", by, "-f", "parquet", "-o", str(target))
    assert code == 0
    assert out == b""
    assert pl.read_parquet(target).height == len(rows)


def test_table_at_fixed_width(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, _ = stats(capsysbinary, str(ONE), "--width", "100", "--color", "never")
    text = out.decode()
    assert code == 0
    assert "ctxtool stats --by turn" in text
    assert "total" in text
    assert "Read 1 file" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "\x1b[" not in text


def test_sort_limit_and_filters(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    _, out, _ = stats(
        capsysbinary, str(DATA), "--by", "request", "--sort", "input", "--desc", "-n", "2", "-f", "json"
    )
    rows = orjson.loads(out)["rows"]
    assert len(rows) == 2
    assert rows[0]["input"] >= rows[1]["input"]
    _, out, _ = stats(capsysbinary, str(DATA), "--project", "ops-box", "-f", "json")
    assert {r["project"] for r in orjson.loads(out)["rows"]} == {"ops-box"}
    _, out, _ = stats(capsysbinary, str(DATA), "--since", "2026-07-01", "--by", "day", "-f", "json")
    assert all(r["day"] >= "2026-07-01" for r in orjson.loads(out)["rows"])


def test_bad_files_are_reported_and_the_rest_still_counts(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    good = write_jsonl(
        tmp_path / "good.jsonl",
        [
            {"sessionId": "g", "projectHash": "h"},
            {"id": "a", "type": "gemini", "content": "", "model": "gemini-2.5-pro", "tokens": {"input": 5}},
        ],
    )
    (tmp_path / "bad.json").write_text("not json at all")
    (tmp_path / "half.json").write_text('{\n  "sessionId": "x",\n  "messages": [')
    code, out, err = stats(capsysbinary, str(tmp_path), "-f", "json")
    assert code == 0
    assert orjson.loads(out)["read"]["requests"] == 1
    lines = err.strip().splitlines()
    assert any(str(tmp_path / "bad.json") in line and "is not JSON" in line for line in lines)
    assert any(str(tmp_path / "half.json") in line and "truncated" in line for line in lines)
    assert "Traceback" not in err
    code, _, _ = stats(capsysbinary, str(tmp_path), "--strict", "-f", "json")
    assert code == 1
    assert good.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--by", "fortnight"], "--by 'fortnight' is not a report"),
        (["--format", "xml"], "--format 'xml' is not supported"),
        (["--since", "yesterday"], "Write it as YYYY-MM-DD"),
        (["--since", "2026-02-01", "--until", "2026-01-01"], "is after --until"),
        (["--sort", "nope", "-f", "json"], "is not a column"),
        (["--bogus"], "No such option"),
    ],
)
def test_usage_errors_exit_2(
    capsysbinary: pytest.CaptureFixture[bytes], args: list[str], message: str
) -> None:
    code, _, err = stats(capsysbinary, str(ONE), *args)
    assert code == 2
    assert message in err


def test_default_root_from_gemini_cli_home(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(DATA, tmp_path / ".gemini" / "tmp")
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    code, out, _ = stats(capsysbinary, "-f", "json")
    assert code == 0
    assert orjson.loads(out)["read"]["files"] == 16


def test_missing_default_root_says_how_to_fix(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, _, err = stats(capsysbinary, "-f", "json")
    assert code == 0
    assert ".gemini/tmp: is where Gemini CLI keeps its sessions, and it does not exist" in err
    assert "set GEMINI_CLI_HOME" in err
    code, _, err = stats(capsysbinary, "-f", "json", "no-such-file.jsonl")
    assert err == "Error: no-such-file.jsonl: matches no session file. Check the path, or quote a glob\n"


def test_console_script_and_module_entry_point() -> None:
    for cmd in (["ctxtool"], [sys.executable, "-m", "ctxtool"]):
        exe = shutil.which(cmd[0]) or str(Path(sys.executable).parent / cmd[0])
        proc = subprocess.run(
            [exe, *cmd[1:], "stats", str(ONE), "-f", "json"], capture_output=True, check=False
        )
        assert proc.returncode == 0, proc.stderr
        assert orjson.loads(proc.stdout)["by"] == "turn"


def test_unexpected_errors_show_no_traceback_unless_asked(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctxtool.frames.tally

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(ctxtool.frames.tally, "tally", boom)
    code, _, err = stats(capsysbinary, str(ONE))
    assert code == 1
    assert "kaboom" in err
    assert "--traceback" in err
    assert "Traceback" not in err
    with pytest.raises(RuntimeError):
        run(["--traceback", "stats", str(ONE)])


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--by", "sesion"], "Did you mean session? Use one of: turn, request, session"),
        (["--format", "jsn"], "Did you mean json? Use one of: table, json"),
        (["--by", "session", "--sort", "totl"], "Did you mean total? Use one of: session,"),
        (["--by", "xyz"], "is not a report. Use one of: turn,"),  # nothing near: no guess
    ],
)
def test_a_mistyped_choice_gets_the_nearest_one(
    capsysbinary: pytest.CaptureFixture[bytes], args: list[str], hint: str
) -> None:
    code, out, err = stats(capsysbinary, str(DATA), *args)
    assert (code, out) == (2, b"")
    error = err.splitlines()[-1]  # (--sort is checked after loading: the fixtures' warnings come first)
    assert error.startswith("Error: ")
    assert hint in error


def test_filters_that_match_nothing_say_so(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, err = stats(capsysbinary, str(DATA), "--session", "no-such-id", "--since", "2026-01-01")
    assert (code, out) == (0, b"")
    assert "Nothing to report. 15 sessions were read, but nothing matches" in " ".join(err.split())
    assert "--since 2026-01-01 --session no-such-id: loosen or drop them." in " ".join(err.split())


def test_a_folder_without_session_files_is_named_as_such(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    """A folder that holds no session file is not an unreadable file: the caption, the warning and the JSON
    say what was found and where to point instead, and count it apart from the unreadable files."""
    empty = tmp_path / "notes"
    empty.mkdir()
    (empty / "readme.txt").write_text("no sessions here")
    code, out, err = stats(capsysbinary, str(empty), "--no-cache")
    assert code == 1
    assert out == b""
    assert "could not be read" not in err
    assert "1 folder without session files (see warnings)" in err
    assert f"warning: {empty}: holds no Gemini CLI session files (session-*.json or session-*.jsonl)" in err
    assert "point at" in err
    assert "chats/ folder" in err
    code, out, err = stats(capsysbinary, str(empty), "--no-cache", "-f", "json")
    assert code == 1
    read = orjson.loads(out)["read"]
    assert read["errors"] == []
    assert read["missing_paths"] == []
    [folder] = read["empty_folders"]
    assert folder["path"] == str(empty)
    assert folder["message"].startswith("holds no Gemini CLI session files")


def test_a_folder_without_sessions_among_good_paths_exits_1(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    """README: a PATH given on the command line that matched no session is an error (exit 1); the other
    PATHs are still reported."""
    code, out, err = stats(capsysbinary, str(DATA), str(tmp_path), "--no-cache", "-f", "json")
    assert code == 1
    doc = orjson.loads(out)
    assert doc["read"]["sessions"] == 15
    assert [f["path"] for f in doc["read"]["empty_folders"]] == [str(tmp_path)]
    assert "holds no Gemini CLI session files" in err


def test_counts_in_the_caption_are_in_the_singular_when_one(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    one = write_jsonl(
        tmp_path / "chats" / "session-2026-06-01T10-00-0a1b2c3d.jsonl",
        [
            {"sessionId": "0a1b2c3d", "projectHash": "h"},
            {"id": "u", "type": "user", "content": [{"text": "hi"}]},
            {"id": "a", "type": "gemini", "content": "", "model": "gemini-2.5-pro", "tokens": {"input": 5}},
        ],
    )
    code, out, _ = stats(capsysbinary, str(one), "--no-cache", "--width", "300")
    assert code == 0
    assert "Read 1 file (" in out.decode()
    assert "): 1 session (0 subagent), 1 request." in out.decode()


def test_a_path_that_names_nothing_is_one_line(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    """Not a warning, a "Read 0 files" caption and then the error: one line, naming the path and the fix."""
    nope = tmp_path / "nonexistent"
    code, out, err = stats(capsysbinary, str(nope), "--no-cache")
    assert code == 1
    assert out == b""
    assert err == f"Error: {nope}: matches no session file. Check the path, or quote a glob\n"
    # Beside a PATH that is read, the warning stays: the table's caption points to it.
    code, _, err = stats(capsysbinary, str(nope), str(ONE), "--no-cache")
    assert code == 1
    assert f"warning: {nope}: matches no file" in err
