"""``ctxtool stats`` equals Gemini CLI's own accounting on sessions Gemini CLI 0.61.0 wrote (issue 18).

Two sources, one comparison: the recordings committed in ``tests/recorded/gemini-cli-<version>/`` (played once
with ``make gemini-cli-fixtures``), and the same scenarios played now by the installed Gemini CLI, so a new
release that records or counts differently fails here first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxtool.cli import run
from tests.conftest import write_jsonl
from tests.gemini_cli_scenarios import RECORDED, SCENARIOS, STATS_FILE, play, role_totals, write_recording

# ctxtool's field for each of Gemini CLI's token fields (``stats.models[M].roles[R].tokens``).
FIELDS = {
    "prompt": "prompt_tokens",  # ctxtool's `input` excludes the cached tokens, as ccusage's does
    "candidates": "output",
    "cached": "cached",
    "thoughts": "thoughts",
    "tool": "tool",
    "total": "total",
}


def stats_json(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> dict[str, Any]:
    assert run(["stats", *args, "--format", "json", "--no-cache"]) == 0
    out: dict[str, Any] = orjson.loads(capsysbinary.readouterr().out)
    return out


def assert_same_accounting(recording: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    gemini = json.loads((recording / STATS_FILE).read_text())
    main = role_totals(gemini["runs"], "main")
    [row] = stats_json(capsysbinary, str(recording / "tmp"), "--by", "session")["rows"]
    ours = {"requests": row["requests"], **{theirs: row[mine] for theirs, mine in FIELDS.items()}}
    assert ours == main
    # One turn per prompt typed (one per run), one compression per round Gemini CLI ran.
    assert row["turns"] == gemini["prompts"]
    assert row["compressions"] == gemini["compressions"]
    # Every model is known, so the session has a cost.
    assert row["cost"] is not None
    assert row["cost"] > 0
    # Gemini CLI's compression calls are not in the file: estimated apart, never in the billed figures.
    hidden = role_totals(gemini["runs"], "utility_compressor")
    assert row["hidden_requests"] == hidden["requests"]
    assert (row["hidden_input"] > 0) == (hidden["requests"] > 0)
    # Per turn, the requests add up to the same figures.
    turns = stats_json(capsysbinary, str(recording / "tmp"), "--by", "turn")["rows"]
    assert [t["turn"] for t in turns] == list(range(1, gemini["prompts"] + 1))
    assert sum(t["requests"] for t in turns) == main["requests"]
    assert sum(t["prompt_tokens"] for t in turns) == main["prompt"]
    assert sum(t["input"] + t["cached"] for t in turns) == main["prompt"]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_recorded_sessions_match_gemini_clis_own_stats(
    scenario: str, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    assert_same_accounting(RECORDED / scenario, capsysbinary)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_installed_gemini_cli_still_agrees(
    scenario: str, gemini_cli: Path, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    played = play(gemini_cli, SCENARIOS[scenario](), tmp_path / "play")
    write_recording(played, tmp_path / "recording")
    assert_same_accounting(tmp_path / "recording", capsysbinary)


def test_an_empty_answer_is_priced_with_the_model_before_it(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    recording = RECORDED / "tools-and-resumes" / "tmp"
    rows = stats_json(capsysbinary, str(recording), "--by", "request")["rows"]
    *named, empty = rows
    assert not any(r["model_inferred"] for r in named)
    assert empty["model_inferred"] is True
    assert empty["output"] == 0
    assert empty["model"] == named[-1]["model"]
    assert empty["cost"] is not None


def test_resume_rewrites_change_no_figure(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    """Two resumes rewrote the history (with the duplicated functionResponse copies Gemini CLI 0.61 writes);
    the billed figures, turns and times are those of the lines that recorded the requests."""
    source = next((RECORDED / "tools-and-resumes" / "tmp" / "proj" / "chats").glob("session-*.jsonl"))
    lines = source.read_bytes().splitlines()
    first_resume = next(i for i, line in enumerate(lines) if i and b'"projectHash"' in line)
    cut = tmp_path / "tmp" / "proj" / "chats" / source.name
    cut.parent.mkdir(parents=True)
    cut.write_bytes(b"\n".join(lines[:first_resume]) + b"\n")
    whole = stats_json(capsysbinary, str(source), "--by", "request")["rows"]
    before = stats_json(capsysbinary, str(cut), "--by", "request")["rows"]
    assert whole[: len(before)] == before
    assert {r["timestamp"][:19] for r in whole} == {
        json.loads(line)["timestamp"][:19]
        for line in lines
        if b'"tokens"' in line and b'"$set"' not in line[:10]
    }


def test_a_rollback_counts_each_response_once_and_the_live_view_follows(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """A rollback as Gemini CLI 0.61.0 writes it (chatRecordingService.ts ``updateMessagesFromHistory``): a
    ``$set.messages`` whose kept messages are the recorded ones (same ids, ``tokens`` kept by ``...existing``)
    and whose others are new copies without tokens."""
    tokens = {"input": 1000, "output": 10, "cached": 0, "thoughts": 0, "tool": 0, "total": 1010}
    model = "gemini-3.1-pro-preview"
    meta = {"sessionId": "s1", "projectHash": "h", "startTime": "2026-11-20T10:00:00.000Z", "kind": "main"}
    prompt1 = {
        "id": "u1",
        "timestamp": "2026-11-20T10:00:01.000Z",
        "type": "user",
        "content": [{"text": "one"}],
    }
    answer1 = {
        "id": "g1",
        "timestamp": "2026-11-20T10:00:02.000Z",
        "type": "gemini",
        "content": "done",
        "tokens": tokens,
        "model": model,
    }
    prompt2 = {
        "id": "u2",
        "timestamp": "2026-11-20T10:01:00.000Z",
        "type": "user",
        "content": [{"text": "two"}],
    }
    call2 = {
        "id": "g2",
        "timestamp": "2026-11-20T10:01:02.000Z",
        "type": "gemini",
        "content": "",
        "tokens": {**tokens, "input": 2000, "total": 2010},
        "model": model,
        "toolCalls": [{"id": "c1", "name": "run_shell_command", "status": "cancelled"}],
    }
    kept = [
        {**prompt1, "timestamp": "2026-11-21T09:00:00.000Z"},
        {**answer1, "timestamp": "2026-11-21T09:00:00.000Z"},
        {
            "id": "n1",
            "timestamp": "2026-11-21T09:00:00.000Z",
            "type": "user",
            "content": [{"text": "two"}],
        },
    ]
    path = write_jsonl(
        tmp_path / "tmp" / "proj" / "chats" / "session-2026-11-20T10-00-s1.jsonl",
        [meta, prompt1, answer1, prompt2, call2, {"$set": {"messages": kept}}],
    )
    [billed] = stats_json(capsysbinary, str(path), "--by", "session")["rows"]
    assert (billed["requests"], billed["input"], billed["turns"]) == (2, 3000, 2)
    assert billed["start"].startswith("2026-11-20T10:00:00")
    days = stats_json(capsysbinary, str(path), "--by", "day")["rows"]
    assert [(d["day"], d["requests"]) for d in days] == [("2026-11-20", 2)]
    assert run(["stats", str(path), "--by", "turn", "--live", "--format", "json", "--no-cache"]) == 0
    live = orjson.loads(capsysbinary.readouterr().out)["rows"]
    assert [(t["turn"], t["prompt"], t["requests"]) for t in live] == [(1, "one", 1), (2, "two", 0)]


def test_the_stray_file_of_a_resume_is_part_of_its_session(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """A resume in another minute than the session file's name leaves a file of its own (metadata and the
    environment message, same session id): read as part of the session, not as a second one."""
    source = next((RECORDED / "tools-and-resumes" / "tmp" / "proj" / "chats").glob("session-*.jsonl"))
    chats = tmp_path / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    (chats / source.name).write_bytes(source.read_bytes())
    alone = stats_json(capsysbinary, str(tmp_path / "tmp"), "--by", "session")["rows"]
    head = source.read_bytes().splitlines()[:2]
    assert b'"$set":{"messages"' in head[1]
    # session-YYYY-MM-DDTHH-MM-<id8>.jsonl: the same session id, a later minute.
    stray = chats / (
        source.name[: len("session-YYYY-MM-DDTHH-")] + "59" + source.name[len("session-YYYY-MM-DDTHH-MM") :]
    )
    assert stray.name != source.name
    stray.write_bytes(b"\n".join(head) + b"\n")
    report = stats_json(capsysbinary, str(tmp_path / "tmp"), "--by", "session")
    assert report["read"]["files"] == 2
    [row] = report["rows"]
    assert {k: v for k, v in row.items() if k != "end"} == {k: v for k, v in alone[0].items() if k != "end"}


def test_an_unknown_model_leaves_the_known_part_of_a_cost(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    tokens = {"input": 1000, "output": 10, "cached": 0, "thoughts": 0, "tool": 0, "total": 1010}
    meta = {"sessionId": "s2", "projectHash": "h", "startTime": "2026-11-20T10:00:00.000Z", "kind": "main"}
    records: list[object] = [meta]
    for n, model in enumerate(("gemini-3.1-pro-preview", "auto-gemini-3", "gemini-3.1-pro-preview")):
        records.append(
            {
                "id": f"u{n}",
                "timestamp": f"2026-11-20T10:0{n}:00.000Z",
                "type": "user",
                "content": [{"text": f"q{n}"}],
            }
        )
        records.append(
            {
                "id": f"g{n}",
                "timestamp": f"2026-11-20T10:0{n}:05.000Z",
                "type": "gemini",
                "content": "a",
                "tokens": tokens,
                "model": model,
            }
        )
    path = write_jsonl(tmp_path / "tmp" / "proj" / "chats" / "session-2026-11-20T10-00-s2.jsonl", records)
    requests = stats_json(capsysbinary, str(path), "--by", "request")["rows"]
    known = [r["cost"] for r in requests if r["model"] != "auto-gemini-3"]
    assert [r["cost"] is None for r in requests] == [False, True, False]
    [session] = stats_json(capsysbinary, str(path), "--by", "session")["rows"]
    assert session["unpriced"] == 1
    assert session["cost"] == pytest.approx(sum(known))
    turns = stats_json(capsysbinary, str(path), "--by", "turn")["rows"]
    assert [(t["unpriced"], t["cost"] is None) for t in turns] == [(0, False), (1, True), (0, False)]
    assert run(["stats", str(path), "--by", "session", "--no-cache", "--color", "never"]) == 0
    table = capsysbinary.readouterr().out.decode()
    assert f"${session['cost']:,.2f}+" in table
    assert "leaves out 1 request whose model has no known price" in table
