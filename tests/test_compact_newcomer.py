"""What a newcomer meets after ``ctxtool compact`` (issue 27): a history that grew is not called compressed,
a compacted copy reads apart from its original in ``stats`` and adds no compression calls Gemini CLI never
made, and the offline summary never cuts a word in two."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from ctxtool.cli import run
from ctxtool.compact import CompactOptions, Destination, compact_session
from ctxtool.compress.gemini_cli import chat_compression as g
from ctxtool.compress.summarize.facts import extract_facts, normalize_ws, word_clip
from ctxtool.compress.summarize.offline import OfflineSummarizer
from ctxtool.frames.build import load
from ctxtool.frames.query import live_only
from ctxtool.render import tables
from ctxtool.session.columns import turn_counts
from ctxtool.session.discover import discover
from ctxtool.session.read import parse_session_bytes
from tests.conftest import FIXTURES, REAL_SESSIONS
from tests.oracle.turns import turn_count

real = pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="../shared/real-sessions is not here")


def _home(tmp_path: Path, *names: str) -> Path:
    """Real session files in one project's chats folder, named as Gemini CLI wrote them."""
    chats = tmp_path / "tmp" / "TP-Tutor" / "chats"
    chats.mkdir(parents=True)
    for name in names:
        shutil.copy2(REAL_SESSIONS / name, chats / name.split("__", 1)[1])
    return chats


def _json(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> dict[str, Any]:
    assert run([*args, "--format", "json"]) == 0
    doc: dict[str, Any] = orjson.loads(capsysbinary.readouterr().out)
    return doc


# ------------------------------------------------------------------------------- a history that grew


def test_the_compact_table_does_not_call_a_larger_history_compressed() -> None:
    rows = [
        {
            "input_path": "/h/chats/session-2026-04-24T23-16-c8b2cbd9.jsonl",
            "status": "COMPRESSED",
            "tokens_before": 889,
            "tokens_after": 962,
            "output_path": "/out/chats/session-2026-04-24T23-16-c8b2cbd9.jsonl",
            "reason": "compression was not beneficial for this history size (889 → 962 tokens)",
        },
        {
            "input_path": "/h/chats/session-2026-04-25T01-53-b1b4c413.jsonl",
            "status": "COMPRESSED",
            "tokens_before": 161_082,
            "tokens_after": 15_777,
            "output_path": "/out/chats/session-2026-04-25T01-53-b1b4c413.jsonl",
        },
        {
            "input_path": "/h/chats/session-2026-04-25T12-47-cdc6c5f9.jsonl",
            "status": "COMPRESSION_FAILED_INFLATED_TOKEN_COUNT",
            "tokens_before": 500,
            "tokens_after": 500,
            "reason": "compression was not beneficial for this history size",
        },
    ]
    table, notes = tables.compact_table(rows, width=80)
    statuses = [str(c) for c in table.columns[1]._cells]
    assert statuses == ["INFLATED", "COMPRESSED", "FAILED_INFLATED"]
    assert any(n.startswith("c8b2cbd9: INFLATED: compression was not beneficial") for n in notes)
    assert any("cdc6c5f9: COMPRESSION_FAILED_INFLATED_TOKEN_COUNT, nothing written" in n for n in notes)


@real
def test_a_real_session_whose_history_grew_says_why_at_80_columns(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    chats = _home(tmp_path, "TP-Tutor__session-2026-04-24T23-16-c8b2cbd9.jsonl")
    path = str(next(chats.iterdir()))
    [row] = _json(capsysbinary, "compact", path, "--force", "--dry-run")["sessions"]
    assert row["tokens_after"] > row["tokens_before"]
    assert row["reason"]
    assert "not beneficial" in row["reason"]
    assert run(["compact", path, "--force", "--dry-run", "--width", "80", "--color", "never"]) == 0
    out = capsysbinary.readouterr().out.decode()
    lines = out.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines)
    [line] = [x for x in lines if x.startswith("c8b2cbd9 ")]
    assert "INFLATED" in line
    assert "COMPRESSED" not in line
    assert "not beneficial" in out
    assert "<session_context>" in out


# ------------------------------------------------------------------------------- a compacted copy


@real
def test_a_compacted_copy_reads_apart_and_adds_no_compression_calls(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    chats = _home(tmp_path, "TP-Tutor__session-2026-04-25T01-53-b1b4c413.jsonl")
    out = tmp_path / "compacted"
    [row] = _json(capsysbinary, "compact", str(chats), "--force", "--out", str(out))["sessions"]
    assert row["status"] == "COMPRESSED"
    assert row["written"]
    before = _json(capsysbinary, "stats", str(chats), "--by", "session", "--no-cache")["rows"]
    both = _json(capsysbinary, "stats", str(chats), str(out), "--by", "session", "--no-cache")["rows"]
    copies = [r for r in both if r["derived_from"]]
    originals = [r for r in both if not r["derived_from"]]
    assert len(copies) == 1
    assert copies[0]["session_id"] == originals[0]["session_id"]
    assert copies[0]["compressions"] >= 1  # it holds a snapshot: ctxtool's own
    assert copies[0]["hidden_requests"] == 0
    assert copies[0]["hidden_cost"] == 0
    assert originals[0]["hidden_requests"] == before[0]["hidden_requests"]
    assert copies[0]["requests"] == 0
    assert copies[0]["cost"] == 0

    args = ["stats", str(chats), str(out), "--by", "session", "--no-cache", "--width", "80"]
    assert run([*args, "--color", "never"]) == 0
    text = capsysbinary.readouterr().out.decode()
    labels = [line.split("│")[1].strip() for line in text.splitlines() if "b1b4c413" in line]
    assert sorted(labels) == ["b1b4c413", "b1b4c413 (compacted)"]
    if before[0]["hidden_requests"] == 0:
        assert "compression calls" not in text


def _fixture_home(tmp_path: Path, *names: str) -> Path:
    """Fixture sessions in a project's chats folder; returns the first."""
    chats = tmp_path / "home" / "tmp" / "ctxdemo" / "chats"
    chats.mkdir(parents=True)
    for name in names:
        shutil.copy2(FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats" / name, chats / name)
    return chats / names[0]


def _session_labels(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> list[str]:
    """The session column of a stats table, rows only (not the totals)."""
    assert run(["stats", *args, "--no-cache", "--width", "120", "--color", "never"]) == 0
    text = capsysbinary.readouterr().out.decode()
    cells = [line.split("│")[1].strip() for line in text.splitlines()[3:] if line.startswith("│ ")]
    return [c for c in cells if c != "total"]


def test_the_turns_and_requests_of_a_compacted_copy_read_apart(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """A copy written with the original's id and name: its turn rows carry ``derived_from`` and are labelled
    in the table, as its session row is. (It has no request rows: its messages are copies without
    ``tokens``.)"""
    session = _fixture_home(tmp_path, "session-2026-04-20T10-00-e1e2e3e4.jsonl")
    out = tmp_path / "compacted"
    [row] = _json(capsysbinary, "compact", str(session), "--force", "--out", str(out))["sessions"]
    assert row["written"]
    requests = _json(capsysbinary, "stats", str(session), str(out), "--by", "request", "--no-cache")["rows"]
    assert requests
    assert {r["derived_from"] for r in requests} == {None}
    for by in ("turn", "session"):
        rows = _json(capsysbinary, "stats", str(session), str(out), "--by", by, "--no-cache")["rows"]
        marks = {r["derived_from"] for r in rows}
        assert marks == {None, "e1e2e3e4-5f60-4718-9a2b-3c4d5e6f7081"}, by
        labels = _session_labels(capsysbinary, str(session), str(out), "--by", by)
        copies = [r["derived_from"] is not None for r in rows]
        assert labels == ["e1e2e3e4 (compacted)" if c else "e1e2e3e4" for c in copies], by


def test_a_session_compacted_in_place_is_marked_and_adds_no_compression_calls(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """After ``compact --in-place`` the file itself is the compacted session: the ``ctxtoolCompaction`` mark
    of the ``$set`` it appended makes stats label it and leave ctxtool's own summary out of the compression
    calls Gemini CLI bills unrecorded; ``--undo`` takes the mark away with the compaction."""
    session = _fixture_home(
        tmp_path, "session-2026-04-22T16-40-5e7a0b1c.jsonl", "session-2026-04-28T13-05-7f6e5d4c.jsonl"
    )
    [before] = _json(capsysbinary, "stats", str(session), "--by", "session", "--no-cache")["rows"]
    assert before["compacted_at"] is None
    [row] = _json(capsysbinary, "compact", str(session), "--force", "--in-place")["sessions"]
    assert row["status"] == "COMPRESSED"
    [after] = _json(capsysbinary, "stats", str(session), "--by", "session", "--no-cache")["rows"]
    assert after["compacted_at"] is not None
    assert after["compressions"] == before["compressions"] + 1  # ctxtool's snapshot
    assert after["hidden_requests"] == before["hidden_requests"] == 0
    assert (after["requests"], after["total"]) == (before["requests"], before["total"])  # still billed
    for by in ("session", "turn", "request"):
        labels = _session_labels(capsysbinary, str(session.parent), "--by", by)
        assert "5e7a0b1c (compacted)" in labels, by
        assert set(labels) == {"5e7a0b1c (compacted)", "7f6e5d4c"}, by
    assert run(["compact", str(session), "--undo"]) == 0
    capsysbinary.readouterr()
    [undone] = _json(capsysbinary, "stats", str(session), "--by", "session", "--no-cache")["rows"]
    assert undone["compacted_at"] is None
    assert _session_labels(capsysbinary, str(session), "--by", "session") == ["5e7a0b1c"]


# ------------------------------------------------------------------------------- words stay whole


@pytest.mark.parametrize(
    ("text", "limit", "clipped"),
    [
        ("short", 10, "short"),
        ("masteryStore.ts (Cyclic logic) and more", 22, "masteryStore.ts…"),
        ("one two three", 9, "one two…"),
        ("a-very-long-single-word-path/file.ts rest", 10, "a-very-long-single-word-path/file.ts…"),
    ],
)
def test_word_clip_cuts_between_words(text: str, limit: int, clipped: str) -> None:
    assert word_clip(text, limit) == clipped


def _goal_lines(summary: str) -> list[str]:
    body = summary.split("<overall_goal>", 1)[1].split("</overall_goal>", 1)[0]
    return [line.removeprefix("- ").strip() for line in body.strip().splitlines() if line.strip()]


def test_the_goal_continues_from_the_word_its_head_left_out() -> None:
    words = " ".join(f"word{i}" for i in range(200))
    history = [
        {"role": "user", "parts": [{"text": "<session_context>\nctx\n</session_context>"}]},
        {"role": "user", "parts": [{"text": words}]},
        {"role": "model", "parts": [{"text": "ok"}]},
    ]
    lines = _goal_lines(OfflineSummarizer().summarize(history))
    head, rest = lines[0], lines[1].removeprefix("(continued) ")
    assert head.endswith("…")
    joined = head.removesuffix("…") + " " + rest.removesuffix("…")
    assert words.startswith(joined)


@real
def test_no_word_is_split_in_the_real_sessions_offline_goals() -> None:
    checked = 0
    for src in sorted(REAL_SESSIONS.glob("*.json*")):
        session = parse_session_bytes(src.read_bytes(), src)
        curated = g.session_to_curated_history([dict(m) for m in session.messages], "gemini-2.5-pro")
        history = curated.contents
        goal = normalize_ws(extract_facts(history).goal or "")
        if len(goal) <= 240:
            continue
        lines = _goal_lines(OfflineSummarizer().summarize(history))
        source_words = set(goal.split())
        for line in lines:
            text = line.removeprefix("(continued) ").removesuffix("…")
            parts = text.split()
            assert parts[0] in source_words, (src.name, line[:80])
            assert parts[-1] in source_words, (src.name, line[:80])
        checked += 1
    assert checked >= 3


# ------------------------------------------------------------------- the summary counts as stats does

_HEADER_COUNTS = re.compile(
    r"generated offline by ctxtool[^:]*: ([\d,]+) turns?, ([\d,]+) requests?, ([\d,]+) prompts?, "
    r"([\d,]+) tool calls?"
)


def _sessions(root: Path) -> list[Path]:
    return [sp.path for sp in discover([root], subagents=False).files]


def _stats_counts(messages: pl.DataFrame) -> tuple[int, int, int, int]:
    """What ``stats`` counts of these message rows: its own turn rule (``turn_count``), its requests (the
    rows of ``--by turn`` sum them), the typed prompts and the tool calls of ``--by session``."""
    request = (pl.col("type") == "gemini") & pl.col("input").is_not_null()
    row = messages.select(
        turn_count().alias("turns"),
        request.sum().alias("requests"),
        pl.col("is_prompt").sum().alias("prompts"),
        pl.col("tool_calls").sum(),
    ).row(0)
    return (int(row[0]), int(row[1]), int(row[2]), int(row[3]))


def _check_counts_of_the_span(root: Path, tmp_path: Path) -> int:
    """Compact each session of ``root`` offline (``--force``) and check that the summary's header counts
    what ``stats`` counts of the messages it summarised; returns how many summaries were checked."""
    corpus = live_only(load([root], subagents=False, workers=1))
    keys = dict(corpus.sessions.select("file", "session_key").iter_rows())
    checked = []
    # A legacy .json that Gemini CLI resumed into a .jsonl is one session for stats: the .jsonl's.
    for n, path in enumerate(p for p in _sessions(root) if str(p) in keys):
        out = tmp_path / f"{n}{path.suffix}"
        report = compact_session(
            path, OfflineSummarizer(), CompactOptions(force=True), Destination(out_file=out)
        )
        if report.status != "COMPRESSED":
            continue
        summary = next(
            m for m in parse_session_bytes(out.read_bytes(), out).messages if "<state_snapshot>" in str(m)
        )
        found = _HEADER_COUNTS.search(str(summary["content"]))
        assert found, f"{path.name}: no counts in the summary's header"
        header = tuple(int(g.replace(",", "")) for g in found.groups())
        live = parse_session_bytes(path.read_bytes(), path).messages
        span = [m["id"] for m in live[: report.messages_total - (report.messages_kept or 0)]]
        rows = corpus.messages.filter(
            (pl.col("session_key") == keys[str(path)]) & pl.col("message_id").is_in(span)
        )
        assert header == _stats_counts(rows), f"{path.name}: header {header}, stats {_stats_counts(rows)}"
        checked.append(path.name)
    return len(checked)


def test_the_offline_summary_counts_turns_requests_and_prompts_as_stats_does(tmp_path: Path) -> None:
    assert _check_counts_of_the_span(FIXTURES, tmp_path) >= 8


@real
def test_the_offline_summary_counts_as_stats_does_in_every_real_session(tmp_path: Path) -> None:
    assert _check_counts_of_the_span(REAL_SESSIONS, tmp_path) >= 25


def test_turn_counts_are_the_stats_rule_over_whole_sessions() -> None:
    """``session.columns.turn_counts`` (no polars: what compact uses) against ``stats`` itself, per session,
    billed and live, on the fixtures and (when present) the real sessions."""
    roots = [FIXTURES, *([REAL_SESSIONS] if REAL_SESSIONS.is_dir() else [])]
    compared = 0
    for root in roots:
        billed = load([root], subagents=False, workers=1)
        for view in (billed, live_only(billed)):
            for path in _sessions(root):
                session = parse_session_bytes(path.read_bytes(), path)
                key = view.sessions.filter(pl.col("file") == str(path)).get_column("session_key")
                if key.is_empty():
                    continue
                rows = view.messages.filter(pl.col("session_key") == key.item())
                within = None if view is billed else {m["id"] for m in session.messages}
                c = turn_counts(session.billed, session.copies, within)
                assert (c.turns, c.requests, c.prompts, c.tool_calls) == _stats_counts(rows), path.name
                compared += 1
    assert compared >= 20
