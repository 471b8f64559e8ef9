"""`ctxtool compact` as a user runs it: formats, exit statuses, batches, the gemini summarizer over HTTP."""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from pytest_httpserver import HTTPServer

from ctxtool.cli import run
from ctxtool.compress.gemini_cli import chat_compression as g
from ctxtool.session.read import read_session
from tests.conftest import FIXTURES, REPO

FIXTURE_CHATS = FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats"
COMPRESSION_FIXTURE = "session-2026-05-25T09-30-c4e5f6a7.jsonl"


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the fixture data root, and a working directory outside it."""
    root = tmp_path / "gemini" / "tmp"
    shutil.copytree(FIXTURES / "gemini" / "tmp", root)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return root


def compact(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(["compact", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def sessions_of(out: str) -> list[dict[str, Any]]:
    doc = json.loads(out)
    assert doc["schema_version"] == 3
    assert doc["command"] == "compact"
    rows: list[dict[str, Any]] = doc["sessions"]
    return rows


def test_json_report_and_default_output_dir(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = data / "ctxdemo" / "chats" / COMPRESSION_FIXTURE
    code, out, err = compact(capsys, str(path), "--force", "--format", "json")
    assert code == 0, err
    (row,) = sessions_of(out)
    assert row["status"] == "COMPRESSED"
    assert row["profile"] == "gemini-cli@latest"
    assert row["summarizer"] == "offline"
    assert row["deterministic"] is True
    for key in ("tokens_before", "tokens_after", "split_index", "messages_summarised", "messages_kept"):
        assert isinstance(row[key], int)
    assert set(row["retention"]) == {"requests", "paths", "commands", "errors", "directives"}
    assert row["env_synthesized"] is True
    expected = Path.cwd() / "ctxtool-compacted" / "ctxdemo" / "chats" / COMPRESSION_FIXTURE
    assert Path(row["output_path"]).resolve() == expected.resolve()
    assert read_session(expected).messages[1]["content"][0]["text"] == g.SUMMARY_ACK_TEXT


def test_batch_with_a_broken_file_goes_on(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chats = data / "ctxdemo" / "chats"
    (chats / "session-2026-01-01T00-00-deadbeef.json").write_text("not json at all")
    code, out, err = compact(capsys, str(chats), "--force", "-f", "json", "--out", str(data.parent / "out"))
    assert code == 1
    rows = sessions_of(out)
    statuses = {Path(r["input_path"]).name: r["status"] for r in rows}
    assert statuses["session-2026-01-01T00-00-deadbeef.json"] == "FAILED"
    assert statuses[COMPRESSION_FIXTURE] == "COMPRESSED"
    assert list(statuses.values()).count("COMPRESSED") >= 5
    assert "deadbeef.json: is not JSON" in err


def test_table_output(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = compact(capsys, str(data / "ctxdemo" / "chats"), "--force", "--width", "200")
    assert code == 0
    assert "COMPRESSED" in out
    assert "NOOP" in out
    assert "ctxtool-compacted/ctxdemo/chats/" in out


def test_dry_run_writes_nothing(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p for p in data.parent.rglob("*"))
    code, out, _ = compact(capsys, str(data), "--force", "--dry-run", "-f", "json")
    assert code == 0
    rows = sessions_of(out)
    assert any(r["status"] == "COMPRESSED" and r["output_path"] for r in rows)
    assert not any(r["written"] for r in rows)
    assert sorted(p for p in data.parent.rglob("*")) == before
    code, out, _ = compact(capsys, str(data), "--force", "--dry-run", "--width", "200")
    assert "nothing written" in out
    assert "split" in out


def test_noop_without_force(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = compact(capsys, str(data / "ctxdemo" / "chats" / COMPRESSION_FIXTURE), "-f", "json")
    assert code == 0
    (row,) = sessions_of(out)
    assert row["status"] == "NOOP"
    assert row["written"] is False
    assert not (Path.cwd() / "ctxtool-compacted").exists()
    assert row["reason"].startswith("below the threshold: ")
    # The threshold check reads what Gemini CLI reads: the recorded prompt tokens of the last request.
    assert row["threshold_tokens_source"] == "recorded"
    assert row["threshold_tokens"] == row["recorded_prompt_tokens"]
    assert f"{row['threshold_tokens']:,} tokens" in row["reason"]
    assert "--force" in row["reason"]
    code, out, _ = compact(capsys, str(data / "ctxdemo" / "chats" / COMPRESSION_FIXTURE), "--width", "300")
    assert "nothing written: below the threshold" in out


def test_noop_reason_of_another_strategy(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = data / "ctxdemo" / "chats" / COMPRESSION_FIXTURE
    code, out, _ = compact(capsys, str(path), "--strategy", "codex", "-f", "json")
    (row,) = sessions_of(out)
    assert (code, row["status"], row["written"]) == (0, "NOOP", False)
    assert row["reason"].startswith("codex's trigger (")
    assert "--force" in row["reason"]
    code, out, _ = compact(capsys, str(path), "--strategy", "codex", "-f", "json", "--force", "--dry-run")
    (row,) = sessions_of(out)
    assert row["status"] == "COMPRESSED"
    # A reason only where the history grew (issue 27): then it says so.
    assert (row["reason"] is None) == (row["tokens_after"] <= row["tokens_before"])


def test_as_new_session_and_in_place(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chats = data / "ctxdemo" / "chats"
    path = chats / COMPRESSION_FIXTURE
    code, out, _ = compact(capsys, str(path), "--force", "--as-new-session", "-f", "json")
    assert code == 0
    (row,) = sessions_of(out)
    new = Path(row["output_path"])
    assert new.parent == chats
    assert new.name.startswith("session-")
    assert new.name != path.name
    assert read_session(new).session_id == row["session_id"] != read_session(path).session_id

    before = path.read_bytes()
    code, out, _ = compact(capsys, str(path), "--force", "--in-place", "-f", "json")
    assert code == 0
    (row,) = sessions_of(out)
    assert Path(row["backup_path"]).read_bytes() == before
    assert path.read_bytes() != before
    # A second batch over the folder never compacts the backup.
    code, out, _ = compact(capsys, str(chats), "--dry-run", "-f", "json")
    assert not any(".ctxtool-backup-" in r["input_path"] for r in sessions_of(out))


@pytest.mark.parametrize(
    "args",
    [
        ["--in-place", "--as-new-session"],
        ["--summarizer", "claude"],
        ["--format", "csv"],
        ["--threshold", "1.5"],
        ["--profile", "gemini-cli@9"],
        ["--summary-budget", "10"],
        ["--summarizer-model", "gemini-2.5-flash"],
    ],
)
def test_usage_errors(data: Path, capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    code, _, err = compact(capsys, str(data / "ctxdemo" / "chats" / COMPRESSION_FIXTURE), *args)
    assert code == 2
    assert err.startswith("Error:")


def test_out_inside_the_input_tree_is_refused(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chats = data / "ctxdemo" / "chats"
    code, _, err = compact(capsys, str(chats), "--force", "--out", str(chats.parent / "compacted"))
    assert code == 2
    assert "inside the input tree" in err


def test_out_file_for_one_session(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = data / "ctxdemo" / "chats" / COMPRESSION_FIXTURE
    target = Path.cwd() / "compacted.jsonl"
    code, out, err = compact(capsys, str(source), "--force", "-f", "json", "--out", str(target))
    assert code == 0, err
    (row,) = sessions_of(out)
    assert row["status"] == "COMPRESSED"
    assert Path(row["output_path"]) == target
    assert read_session(target).messages[1]["content"][0]["text"] == g.SUMMARY_ACK_TEXT
    assert not (Path.cwd() / "ctxtool-compacted").exists()
    written = target.read_bytes()

    # Run again: the file is not replaced.
    code, _, err = compact(capsys, str(source), "--force", "--out", str(target))
    assert (code, target.read_bytes()) == (2, written)
    assert "already exists" in err


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("{source}", "is the input itself"),
        ("{chats}/copy.jsonl", "chats/ folder"),
    ],
)
def test_out_file_refusals(data: Path, capsys: pytest.CaptureFixture[str], out: str, message: str) -> None:
    chats = data / "ctxdemo" / "chats"
    source = chats / COMPRESSION_FIXTURE
    before = source.read_bytes()
    code, _, err = compact(capsys, str(source), "--force", "--out", out.format(source=source, chats=chats))
    assert code == 2
    assert message in err
    assert err.count("\n") == 1
    assert source.read_bytes() == before
    assert not (chats / "copy.jsonl").exists()


def test_era_conversion(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = data / "ctxdemo" / "chats" / COMPRESSION_FIXTURE  # a .jsonl session
    same = Path.cwd() / "same.jsonl"
    legacy = Path.cwd() / "legacy.json"
    for target in (same, legacy):
        code, out, err = compact(capsys, str(source), "--force", "-f", "json", "--out", str(target))
        assert code == 0, err
        (row,) = sessions_of(out)
        assert (row["era"], row["output_era"]) == ("jsonl", target.suffix[1:])
    kept, converted = read_session(same), read_session(legacy)
    assert converted.era == "json"
    assert legacy.read_bytes().startswith(b"{\n  ")  # one indented document, as Gemini CLI wrote .json
    # The summary and the ack get fresh ids and times on each run; everything else is the same.
    assert converted.messages[2:] == kept.messages[2:]
    assert [m["content"] for m in converted.messages[:2]] == [m["content"] for m in kept.messages[:2]]
    assert converted.session_id == kept.session_id

    # In the output tree the extension follows --era.
    code, out, err = compact(capsys, str(source), "--force", "-f", "json", "--era", "json")
    (row,) = sessions_of(out)
    assert code == 0, err
    assert row["output_path"].endswith(COMPRESSION_FIXTURE.removesuffix(".jsonl") + ".json")
    assert read_session(Path(row["output_path"])).era == "json"


def test_era_leaves_out_a_legacy_file_its_resumed_jsonl_supersedes(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chats = data / "ctxdemo" / "chats"
    pair = "session-2026-03-20T11-00-abcd1234"  # .json, and the .jsonl Gemini CLI wrote on resuming it
    for era in ("json", "jsonl"):
        code, out, err = compact(capsys, str(chats), "--force", "-f", "json", "--era", era)
        assert code == 0, err
        rows = {Path(r["input_path"]).name: r for r in sessions_of(out)}
        legacy, resumed = rows[f"{pair}.json"], rows[f"{pair}.jsonl"]
        assert (legacy["status"], legacy["written"]) == ("NOOP", False)
        assert f"the same session as {pair}.jsonl" in legacy["reason"]
        assert resumed["status"] == "COMPRESSED"
        assert Path(resumed["output_path"]).name == f"{pair}.{era}"
    # Without --era both keep their own format and name, so both are written.
    code, out, _ = compact(capsys, str(chats), "--force", "-f", "json", "--out", "both")
    rows = {Path(r["input_path"]).name: r for r in sessions_of(out)}
    assert code == 0
    assert rows[f"{pair}.json"]["written"]
    assert rows[f"{pair}.jsonl"]["written"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--era", "yaml"], "is not a session format"),
        (["--era", "json", "--in-place"], "keeps each file's format"),
        (["--era", "jsonl", "--out", "x.json"], "does not match --out"),
    ],
)
def test_era_refusals(data: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, _, err = compact(capsys, str(data / "ctxdemo" / "chats" / COMPRESSION_FIXTURE), "--force", *args)
    assert code == 2
    assert message in err
    assert not Path("x.json").exists()


def test_out_file_needs_a_single_input(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = compact(capsys, str(data / "ctxdemo" / "chats"), "--force", "--out", "all.jsonl")
    assert code == 2
    assert "names one file" in err
    assert not Path("all.jsonl").exists()


def test_list_profiles_prints_profiles_with_dates(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = compact(capsys, "--list-profiles")  # no SESSION needed
    assert code == 0
    assert "gemini-cli@latest" in out
    assert "gemini-cli@0.26  2026-01-20 .. 2026-02-06" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    code, out, _ = compact(capsys, "--help")
    assert code == 0
    assert "gemini-cli@0.26" not in out  # the table moved out of --help
    assert "--list-profiles" in out
    for option in ("--output", "--as-new-session", "--in-place", "--dry-run", "--summarizer", "--base-url"):
        assert option in out


def test_out_is_a_hidden_alias_of_output(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Scripts written for `--out` keep working; help shows only --output, and both at once are refused."""
    chats = tmp_path / "proj" / "chats"
    chats.mkdir(parents=True)
    _, out, _ = compact(capsys, "--help")
    assert "--out " not in out
    assert "-o, --output" in out
    code, _, err = compact(capsys, str(chats), "--out", "a", "--output", "b")
    assert code == 2
    assert err.strip() == "Error: --output and --out are the same option. Pass it once, as --output"


# --------------------------------------------------------------------------------------------------
# The gemini summarizer over HTTP (a local server; the key is a dummy)

SNAPSHOT = "<state_snapshot>\n<overall_goal>Move storage to SQLite.</overall_goal>\n</state_snapshot>"


@pytest.fixture
def httpserver() -> Iterator[HTTPServer]:
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    yield server
    server.clear()
    server.stop()


def answer(text: str) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}]}


def test_gemini_summarizer_through_the_cli(
    data: Path, capsys: pytest.CaptureFixture[str], httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "dummy-key-for-tests")
    path = data / "ctxdemo" / "chats" / COMPRESSION_FIXTURE
    route = "/v1beta/models/gemini-2.5-flash:generateContent"
    httpserver.expect_ordered_request(route, method="POST").respond_with_json(answer("draft " + SNAPSHOT))
    httpserver.expect_ordered_request(route, method="POST").respond_with_json(answer("  " + SNAPSHOT + "\n"))
    code, out, err = compact(
        capsys,
        str(path),
        "--force",
        "--summarizer",
        "gemini",
        "--summarizer-model",
        "gemini-2.5-flash",
        "--base-url",
        httpserver.url_for("/"),
        "-f",
        "json",
    )
    assert code == 0, err
    httpserver.check_assertions()
    (row,) = sessions_of(out)
    assert row["status"] == "COMPRESSED"
    assert row["summarizer"] == "gemini"
    assert row["deterministic"] is False
    assert "dummy-key-for-tests" not in out + err
    written = read_session(row["output_path"])
    assert written.messages[0]["content"] == [{"text": SNAPSHOT}]  # the probe's answer, trimmed
    (_first, _), (second, _) = httpserver.log
    body = orjson.loads(second.get_data())
    assert body["contents"][-2] == {"role": "model", "parts": [{"text": "draft " + SNAPSHOT}]}


def test_missing_key_fails_that_file_in_one_line(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = data / "ctxdemo" / "chats" / COMPRESSION_FIXTURE
    code, out, err = compact(capsys, str(path), "--force", "--summarizer", "gemini", "-f", "json")
    assert code == 1
    assert out == ""  # every file failed: nothing on stdout, the one error on stderr
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: no Gemini API key found")
    assert "GEMINI_API_KEY" in lines[0]


def test_without_google_genai_the_gemini_summarizer_names_the_extra_to_install(
    data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """google-genai is the ``gemini`` extra, not a runtime dependency: a compaction that needs the model
    fails in one line naming the install command; one that needs no model (a dry run) runs."""
    monkeypatch.setitem(sys.modules, "google.genai", None)  # what an install without the extra has
    monkeypatch.setenv("GEMINI_API_KEY", "dummy-key-for-tests")
    path = data / "ctxdemo" / "chats" / COMPRESSION_FIXTURE
    code, out, err = compact(capsys, str(path), "--force", "--summarizer", "gemini", "-f", "json")
    assert (code, out) == (1, "")
    [line] = err.strip().splitlines()
    assert line == (
        "Error: the gemini summarizer needs the google-genai package, which is not installed. "
        "Install it with pip install 'ctxtool[gemini]' (or use the offline summarizer, the default)"
    )
    code, out, err = compact(
        capsys, str(path), "--force", "--summarizer", "gemini", "--dry-run", "-f", "json"
    )
    assert code == 0, err
    assert "google-genai" not in err


def test_google_genai_is_an_extra_not_a_runtime_dependency() -> None:
    """``make demo`` installs the runtime only: google-genai (43 MB of the demo venv, with what it alone
    brings) is the ``gemini`` extra; the dev extra keeps it so the tests of the gemini summarizer run."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=\[ ]", d, maxsplit=1)[0] for d in project["dependencies"]]
    assert "google-genai" not in names
    assert [d for d in project["optional-dependencies"]["gemini"] if d.startswith("google-genai")]
    assert [d for d in project["optional-dependencies"]["dev"] if d.startswith("google-genai")]


def _messages(n: int) -> list[dict[str, Any]]:
    """``n`` exchanges with long answers (enough to compress), no ids."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append(
            {
                "timestamp": "2026-08-01T10:00:00Z",
                "type": "user",
                "content": [{"text": f"question {i} " * 40}],
            }
        )
        out.append({"timestamp": "2026-08-01T10:00:01Z", "type": "gemini", "content": f"answer {i} " * 300})
    return out


def test_sessions_without_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A legacy .json without ids is compacted once, with a real split_message_id; a .jsonl whose message
    lines lack ids is one FAILED row whose one-line error names the file, the line and the fix."""
    chats = tmp_path / "gemini" / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    meta = {"sessionId": "11111111-2222-4333-8444-555555555555", "projectHash": "h"}
    legacy = chats / "session-2026-08-01T10-00-11111111.json"
    legacy.write_text(json.dumps({**meta, "messages": _messages(6)}, indent=2), encoding="utf-8")
    lines = chats / "session-2026-08-01T10-00-22222222.jsonl"
    lines.write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in [{**meta, "sessionId": "2222"}, *_messages(6)])
    )
    out_dir = tmp_path / "out"
    code, out, err = compact(capsys, str(legacy), str(lines), "--force", "-f", "json", "--out", str(out_dir))
    assert code == 1
    rows = {Path(r["input_path"]).name: r for r in sessions_of(out)}
    row = rows[legacy.name]
    assert row["status"] == "COMPRESSED"
    assert row["tokens_after"] < row["tokens_before"]
    written = read_session(row["output_path"]).messages
    assert len(written) == 2 + row["messages_kept"] < 2 + 12
    assert row["split_message_id"] == written[2]["id"] != "None"
    assert rows[lines.name]["status"] == "FAILED"
    [error] = [line for line in err.splitlines() if lines.name in line]
    assert error.startswith(f'Error: {lines}: 12 message records have no "id" (the first on line 2)')
    assert error.endswith("or delete them, and run the command again")


@pytest.mark.parametrize("profile", ["gemini-cli@0.3", "gemini-cli@0.7"])
def test_an_empty_split_of_the_eras_before_0_10_is_summarised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], profile: str
) -> None:
    """Before 0.10 an empty split was no NOOP: the summary of nothing is asked for, then found to inflate.
    The split is the env turn, which this session did not store (it once failed: "matches no message")."""
    from tests.conftest import REAL_SESSIONS

    session = tmp_path / "session.json"
    shutil.copyfile(REAL_SESSIONS / "Myflix__session-2026-02-25T17-54-48c7bcc7.json", session)
    code, out, err = compact(
        capsys, str(session), "--force", "--profile", profile, "-o", str(tmp_path / "out"), "--format", "json"
    )
    assert code == 0, err
    [row] = sessions_of(out)
    assert row["status"] == "COMPRESSION_FAILED_INFLATED_TOKEN_COUNT"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.json"))
