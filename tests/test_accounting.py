"""One accounting for every command (ctxtool.measure.tokens): what a recorded response's ``total`` is, what
``input`` means, and that ``stats``, ``audit`` and ``diff`` count a file the same way.

Gemini CLI records ``tokens = {input: promptTokenCount ?? 0, …, total: totalTokenCount ?? 0}``
(chatRecordingService.ts ``recordMessageTokens``): a response whose usage lacked ``totalTokenCount`` is
recorded with ``total: 0`` beside non-zero parts; a fork or an older writer may leave ``total`` out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxtool.cli import run
from ctxtool.common.errors import SessionFormatError
from ctxtool.diff import diff_sessions
from ctxtool.measure.tokens import report_tokens, request_total, total_disagrees
from ctxtool.session.read import read_session
from tests.conftest import FIXTURES, REAL_SESSIONS, write_jsonl

MODEL = "gemini-2.5-pro"


def _header(sid: str) -> dict[str, Any]:
    return {
        "sessionId": sid,
        "projectHash": "ab" * 32,
        "startTime": "2026-06-01T10:00:00.000Z",
        "lastUpdated": "2026-06-01T10:10:00.000Z",
        "kind": "main",
    }


def _user(mid: str, text: str, minute: int) -> dict[str, Any]:
    return {"id": mid, "timestamp": f"2026-06-01T10:{minute:02d}:00.000Z", "type": "user", "content": text}


def _gemini(mid: str, text: str, minute: int, tokens: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": mid,
        "timestamp": f"2026-06-01T10:{minute:02d}:30.000Z",
        "type": "gemini",
        "content": text,
        "model": MODEL,
        "tokens": tokens,
    }


# Four responses, one of each kind the rule tells apart: (tokens, the total every command counts).
ZERO_TOTAL = {"input": 9000, "output": 150, "cached": 6000, "thoughts": 40, "tool": 20, "total": 0}
NO_TOTAL = {"input": 9100, "output": 100, "cached": 8000, "thoughts": 10, "tool": 0}
EQUAL = {"input": 9300, "output": 200, "cached": 0, "thoughts": 0, "tool": 0, "total": 9500}
DISAGREEING = {"input": 9400, "output": 100, "cached": 9000, "thoughts": 0, "tool": 0, "total": 12_000}
EXPECTED_TOTALS = [9210, 9210, 9500, 12_000]


def _session(path: Path, sid: str = "acc00000-0000-4000-8000-000000000001") -> Path:
    records: list[Any] = [_header(sid)]
    for n, tokens in enumerate((ZERO_TOTAL, NO_TOTAL, EQUAL, DISAGREEING), 1):
        records += [_user(f"u{n}", f"question {n}", n), _gemini(f"g{n}", f"answer {n}", n, tokens)]
    return write_jsonl(path, records)


def _json(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[int, dict[str, Any], str]:
    code = run([*args, "--format", "json"])
    captured = capsysbinary.readouterr()
    return code, orjson.loads(captured.out), captured.err.decode()


# --------------------------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("recorded", "parts", "total", "disagrees"),
    [
        (0, (9000, 150, 40, 20), 9210, False),  # totalTokenCount missing: Gemini CLI wrote 0
        (None, (9000, 150, 40, 20), 9210, False),  # no total field at all
        (9210, (9000, 150, 40, 20), 9210, False),
        (12_000, (9400, 100, 0, 0), 12_000, True),  # kept as recorded, and said
        (0, (0, 0, 0, 0), 0, False),  # an empty answer counts nothing
    ],
)
def test_request_total(
    recorded: int | None, parts: tuple[int, int, int, int], total: int, disagrees: bool
) -> None:
    assert request_total(recorded, *parts) == total
    assert total_disagrees(total, *parts) is disagrees


def test_report_tokens_input_excludes_cached() -> None:
    counts = report_tokens(ZERO_TOTAL)
    assert counts == {
        "input": 3000,
        "output": 150,
        "cached": 6000,
        "prompt_tokens": 9000,
        "thoughts": 40,
        "tool": 20,
        "total": 9210,
    }
    assert counts["input"] + counts["cached"] + counts["output"] + counts["thoughts"] + counts["tool"] == 9210
    assert report_tokens(None) is None
    assert report_tokens({"input": True, "output": 2.0, "total": "9"}) == {
        "input": 0,
        "output": 2,
        "cached": 0,
        "prompt_tokens": 0,
        "thoughts": 0,
        "tool": 0,
        "total": 2,
    }


# --------------------------------------------------------------------------------------------- stats, audit


def test_stats_counts_each_total_by_the_rule(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    path = _session(tmp_path / "chats" / "session-2026-06-01T10-00-acc00000.jsonl")
    code, doc, err = _json(capsysbinary, "stats", str(path), "--by", "request", "--no-cache")
    assert code == 0
    rows = doc["rows"]
    assert [r["total"] for r in rows] == EXPECTED_TOTALS
    # The columns add up to total wherever the recorded total does not contradict its parts.
    for row in rows[:3]:
        assert row["input"] + row["cached"] + row["output"] + row["thoughts"] + row["tool"] == row["total"]
    assert doc["totals"]["total"] == sum(EXPECTED_TOTALS)
    assert doc["read"]["total_tokens"] == sum(EXPECTED_TOTALS)
    assert doc["read"]["total_mismatches"] == 1
    lines = [line for line in err.splitlines() if "a total other than" in line]
    assert lines == [
        f"warning: 1 response records a total other than input + output + thoughts + tool; the recorded "
        f"total is counted: {path} (1)"
    ]


def test_mismatches_of_several_files_are_named_on_one_line(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    chats = tmp_path / "tmp" / "proj" / "chats"
    a = _session(chats / "session-2026-06-01T10-00-acc00000.jsonl")
    b = _session(chats / "session-2026-06-01T10-00-acc00001.jsonl", "acc00001-0000-4000-8000-000000000001")
    code, doc, err = _json(capsysbinary, "stats", str(tmp_path), "--no-cache")
    assert code == 0
    assert doc["read"]["total_mismatches"] == 2
    lines = [line for line in err.splitlines() if "a total other than" in line]
    assert len(lines) == 1
    assert lines[0].startswith("warning: 2 responses record")
    assert lines[0].endswith(f"{a} (1), {b} (1)")


def test_a_run_from_the_index_counts_the_same(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm run (rows from ctxtool's index) counts what a cold run counts."""
    monkeypatch.setenv("CTXTOOL_CACHE_DIR", str(tmp_path / "cache"))
    path = _session(tmp_path / "chats" / "session-2026-06-01T10-00-acc00000.jsonl")
    cold = _json(capsysbinary, "stats", str(path), "--by", "request")[1]
    warm = _json(capsysbinary, "stats", str(path), "--by", "request")[1]
    assert warm["read"]["index"]["corpus_from_cache"] or warm["read"]["index"]["files_from_index"]
    assert [r["total"] for r in warm["rows"]] == [r["total"] for r in cold["rows"]] == EXPECTED_TOTALS
    assert warm["read"]["total_mismatches"] == cold["read"]["total_mismatches"] == 1


def test_audit_counts_the_same_totals(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    path = _session(tmp_path / "chats" / "session-2026-06-01T10-00-acc00000.jsonl")
    code, doc, err = _json(
        capsysbinary, "audit", str(path), "--max-session-tokens", "1M", "--max-request-tokens", "1M"
    )
    assert code == 0
    values = {c["rule"]: c["value"] for c in doc["checks"]}
    assert values["max-session-tokens"] == sum(EXPECTED_TOTALS)
    assert values["max-request-tokens"] == max(EXPECTED_TOTALS)
    assert doc["read"]["total_mismatches"] == 1
    assert sum("a total other than" in line for line in err.splitlines()) == 1


# --------------------------------------------------------------------------------------------- diff = stats


def _with_rewind_and_copies(path: Path) -> Path:
    """The four responses, then a rewind that drops the last turn (still billed) and a checkpoint that writes
    the first two turns again as copies without ``tokens`` and ``model`` (billed once)."""
    records: list[Any] = [_header("acc00002-0000-4000-8000-000000000001")]
    for n, tokens in enumerate((ZERO_TOTAL, NO_TOTAL, EQUAL, DISAGREEING), 1):
        records += [_user(f"u{n}", f"question {n}", n), _gemini(f"g{n}", f"answer {n}", n, tokens)]
    records.append({"$rewindTo": "u4"})
    kept = [
        {k: v for k, v in m.items() if k not in ("tokens", "model")}
        for m in records[1:5]
        if isinstance(m, dict)
    ]
    records.append({"$set": {"messages": kept}})
    return write_jsonl(path, records)


STATS_KEYS = (
    "requests",
    "input",
    "output",
    "cached",
    "prompt_tokens",
    "thoughts",
    "tool",
    "total",
    "context",
)


def _stats_row(capsysbinary: pytest.CaptureFixture[bytes], path: Path) -> dict[str, Any]:
    code, doc, _ = _json(capsysbinary, "stats", str(path), "--by", "session", "--no-cache")
    assert code == 0
    (row,) = doc["rows"]
    return {k: row[k] for k in STATS_KEYS}


@pytest.mark.parametrize("build", [_session, _with_rewind_and_copies], ids=["plain", "rewind-and-copies"])
def test_diff_counts_what_stats_counts(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, build: Any
) -> None:
    path = build(tmp_path / "chats" / "session-2026-06-01T10-00-acc00002.jsonl")
    expected = _stats_row(capsysbinary, path)
    assert expected["total"] == sum(EXPECTED_TOTALS)
    assert expected["cached"] > 0
    code, doc, err = _json(capsysbinary, "diff", str(path), str(path))
    assert code == 0
    for side in ("before", "after"):
        assert {k: doc[side]["recorded"][k] for k in STATS_KEYS} == expected, side
        assert doc[side]["total_mismatches"] == 1
    assert sum("a total other than" in line for line in err.splitlines()) == 1
    assert doc["tokens"]["recorded_delta"]["total"] == 0


@pytest.mark.parametrize(
    "path",
    sorted(
        p
        for p in (FIXTURES / "gemini" / "tmp").rglob("*.json*")
        if ".tmp" not in p.name and ".unreadable" not in p.name
    ),
    ids=lambda p: p.name,
)
def test_diff_counts_what_stats_counts_on_every_fixture(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path, path: Path
) -> None:
    # Alone in a folder: stats would merge a legacy .json with the .jsonl it was resumed into.
    alone = tmp_path / "chats" / path.name
    alone.parent.mkdir(parents=True)
    alone.write_bytes(path.read_bytes())
    code, doc, _ = _json(capsysbinary, "stats", str(alone), "--by", "session", "--no-cache")
    assert code == 0
    if not doc["rows"]:
        return  # a file with no session in it (stats reports none)
    (row,) = doc["rows"]
    d = diff_sessions(read_session(alone), read_session(alone))
    assert {k: d.before.recorded[k] for k in STATS_KEYS if k != "context"} == {
        k: row[k] for k in STATS_KEYS if k != "context"
    }


def test_diff_counts_what_stats_counts_on_real_sessions(
    capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path
) -> None:
    if not REAL_SESSIONS.is_dir():
        pytest.skip("shared/real-sessions is not present")
    checked = 0
    for path in sorted(REAL_SESSIONS.iterdir()):
        try:
            sf = read_session(path)
        except SessionFormatError:
            continue  # not a session (the folder's README)
        alone = tmp_path / path.stem / "chats" / path.name  # alone: stats would roll up its subagents
        alone.parent.mkdir(parents=True)
        alone.write_bytes(path.read_bytes())
        code, doc, _ = _json(capsysbinary, "stats", str(alone), "--by", "session", "--no-cache")
        assert code == 0, path.name
        (row,) = doc["rows"]
        recorded = diff_sessions(sf, sf).before.recorded
        if row["context"] is None:  # no request: stats leaves it empty, diff shows 0
            assert row["requests"] == recorded["context"] == 0, path.name
            row["context"] = 0
        assert {k: recorded[k] for k in STATS_KEYS} == {k: row[k] for k in STATS_KEYS}, path.name
        checked += 1
    assert checked > 10


# ------------------------------------------------------------------------------------------ diff: billed once


def _pair(tmp_path: Path, rewrite: Callable[[dict[str, Any]], dict[str, Any]]) -> tuple[Path, Path]:
    """A session with a tool call, and the same session with every message passed through ``rewrite``."""
    before = [
        _user("u1", "read the notes", 1),
        {
            **_gemini("g1", "Reading them.", 1, EQUAL),
            "toolCalls": [
                {
                    "id": "c1",
                    "name": "read_file",
                    "args": {"file_path": "notes.txt"},
                    "result": [
                        {"functionResponse": {"id": "c1", "name": "read_file", "response": {"output": "hi"}}}
                    ],
                    "status": "success",
                    "timestamp": "2026-06-01T10:01:31.000Z",
                }
            ],
        },
        _user("u2", "thanks", 2),
        _gemini("g2", "You are welcome.", 2, ZERO_TOTAL),
    ]
    header = _header("acc00003-0000-4000-8000-000000000001")
    return (
        write_jsonl(tmp_path / "before.jsonl", [header, *before]),
        write_jsonl(tmp_path / "after.jsonl", [header, *[rewrite(m) for m in before]]),
    )


def _without(*keys: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda m: {k: v for k, v in m.items() if k not in keys}


def test_a_kept_message_whose_tokens_were_dropped_is_kept(tmp_path: Path) -> None:
    """``ctxtool compact`` and Gemini CLI write kept messages again without ``tokens`` and ``model``: the
    request was billed once, in the file that recorded it."""
    before, after = _pair(tmp_path, _without("tokens", "model"))
    d = diff_sessions(read_session(before), read_session(after))
    assert [m.status for m in d.messages] == ["kept"] * 4
    assert d.counts == {"removed": 0, "kept": 4, "changed": 0, "added": 0}
    assert not d.differs
    assert all(m.changes == () for m in d.messages)
    assert d.retention is None  # nothing removed or changed, nothing to check
    # Billed once: the requests stay with the file that recorded them.
    g2 = d.messages[3]
    assert (g2.recorded_before, g2.recorded_after) == (9210, None)
    assert (d.before.recorded["requests"], d.after.recorded["requests"]) == (2, 0)


def test_dropping_tool_calls_the_history_needs_is_a_change(tmp_path: Path) -> None:
    """``toolCalls`` that carry the only copy of a call and its output are what the message sends: a copy
    without them lost part of the context, so it is changed."""
    before, after = _pair(tmp_path, _without("tokens", "model", "toolCalls"))
    d = diff_sessions(read_session(before), read_session(after))
    assert [m.status for m in d.messages] == ["kept", "changed", "kept", "kept"]
    assert [c.detail for c in d.messages[1].changes] == ["read_file call removed"]
    assert d.messages[1].estimated_after != d.messages[1].estimated_before


def test_a_rewritten_copy_lists_only_what_changed(tmp_path: Path) -> None:
    rewrite = _without("tokens", "model")
    before, after = _pair(
        tmp_path, lambda m: {**rewrite(m), "content": "Edited."} if m["id"] == "g2" else rewrite(m)
    )
    d = diff_sessions(read_session(before), read_session(after))
    assert [m.status for m in d.messages] == ["kept", "kept", "kept", "changed"]
    assert [c.field for c in d.messages[3].changes] == ["content"]


def test_changed_tokens_of_a_kept_message_are_a_change(tmp_path: Path) -> None:
    """Tokens that were not dropped but differ (a file edited by hand) stay a change."""
    before, after = _pair(tmp_path, lambda m: {**m, "tokens": EQUAL} if m["id"] == "g2" else m)
    d = diff_sessions(read_session(before), read_session(after))
    assert [m.status for m in d.messages] == ["kept", "kept", "kept", "changed"]
    assert [c.detail for c in d.messages[3].changes] == ["tokens.total 9210 → 9500"]
