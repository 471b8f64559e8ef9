"""Pi's cut rules, split turns, summary updates and trigger on small crafted sessions."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from ctxtool.compress.strategies import base as s
from ctxtool.compress.strategies import pi
from ctxtool.compress.summarize.offline import OfflineSummarizer
from ctxtool.session.read import parse_session_bytes
from ctxtool.session.write import session_bytes

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)


def ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"new-{next(counter)}"


def user(i: int, text: str) -> dict[str, Any]:
    return {
        "id": f"u{i}",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "type": "user",
        "content": [{"text": text}],
    }


def gemini(
    i: int, text: str, calls: list[dict[str, Any]] | None = None, total: int | None = None
) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": f"g{i}",
        "timestamp": "2026-01-01T00:00:01.000Z",
        "type": "gemini",
        "content": text,
    }
    if calls:
        rec["toolCalls"] = calls
    if total is not None:
        rec["tokens"] = {
            "input": total - 10,
            "output": 10,
            "cached": 0,
            "thoughts": 0,
            "tool": 0,
            "total": total,
        }
    rec["model"] = "gemini-2.5-pro"
    return rec


def call(cid: str, name: str, args: dict[str, Any], output: str, status: str = "success") -> dict[str, Any]:
    return {"id": cid, "name": name, "args": args, "status": status, "result": output}


def roundtrip(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Write the messages as a .jsonl session and read them back (the output must be loadable)."""
    data = session_bytes("jsonl", {"sessionId": "s", "projectHash": "p", "startTime": "x"}, messages)
    return [dict(m) for m in parse_session_bytes(data).messages]


def opts(**kw: Any) -> s.StrategyOptions:
    return s.StrategyOptions(chat_model="gemini-2.5-pro", **kw)


def big(n: int) -> str:
    return "x" * n


def test_cut_snaps_forward_and_never_lands_on_a_tool_result() -> None:
    # Each gemini record with a call is ~10k tokens (40k chars) of tool output.
    msgs = [
        user(1, "read the files"),
        gemini(1, "", [call("c1", "read_file", {"file_path": "/p/a.py"}, big(40_000))]),
        {
            "id": "r1",
            "timestamp": "t",
            "type": "user",
            "content": [
                {"functionResponse": {"id": "c1", "name": "read_file", "response": {"output": "dup"}}}
            ],
        },
        gemini(2, "", [call("c2", "read_file", {"file_path": "/p/b.py"}, big(40_000))]),
        gemini(3, "", [call("c3", "read_file", {"file_path": "/p/c.py"}, big(40_000))]),
        gemini(4, "done"),
        user(2, "now edit"),
        gemini(5, "ok", total=100),
    ]
    prep = pi.prepare(msgs, pi.DEFAULT_KEEP_RECENT_TOKENS)
    assert prep is not None
    # 20k tokens are reached at g2 (walking back: g4,g3 ~10k each, g2 crosses); the cut is a valid one.
    assert msgs[prep.cut]["id"] == "g2"
    assert s.record_units(prep.cut, msgs[prep.cut])[0].role in ("user", "assistant")
    assert prep.is_split_turn
    assert msgs[prep.turn_start or 0]["id"] == "u1"
    assert prep.to_summarize == []
    assert prep.turn_prefix == list(range(0, prep.cut))
    assert prep.read_files == ["/p/a.py"]  # b.py's read is in the kept tail


def test_plan_layout_split_turn_and_file_lists() -> None:
    msgs = [
        user(1, "first task"),
        gemini(1, "", [call("c1", "write_file", {"file_path": "/p/new.py", "content": "x"}, "ok")]),
        user(2, "second task"),
        gemini(2, "", [call("c2", "read_file", {"file_path": "/p/r.py"}, big(90_000))]),
        gemini(3, "", [call("c3", "read_file", {"file_path": "/p/s.py"}, big(90_000))]),
        gemini(4, "finished", total=60_000),
    ]
    result = pi.PiStrategy().plan(msgs, OfflineSummarizer(), opts(force=True), now=NOW, new_id=ids())
    assert result.status == "COMPRESSED"
    assert result.messages is not None
    out = roundtrip(result.messages)
    first = out[0]["content"][0]["text"]
    assert first.startswith(pi.COMPACTION_SUMMARY_PREFIX)
    assert first.endswith(pi.COMPACTION_SUMMARY_SUFFIX)
    assert pi.SPLIT_TURN_HEADER in first
    assert "<modified-files>\n/p/new.py\n</modified-files>" in first
    assert "## Goal" in first
    assert "## Critical Context" in first
    # Kept tail verbatim, starting at a model message (no ack needed).
    assert out[1]["id"] == msgs[result.kept_from or 0]["id"]
    assert out[1:] == list(msgs[result.kept_from or 0 :])
    assert result.messages_kept == len(out) - 1
    assert [c.extra["purpose"] for c in result.calls] == ["pi-summary", "pi-turn-prefix"]


def test_small_session_keeps_everything_and_adds_ack() -> None:
    msgs = [user(1, "hi"), gemini(1, "hello", total=50)]
    result = pi.PiStrategy().plan(msgs, OfflineSummarizer(), opts(force=True), now=NOW, new_id=ids())
    assert result.messages is not None
    assert [m["type"] for m in result.messages] == ["user", "gemini", "user", "gemini"]
    assert result.messages[1]["content"][0]["text"] == "Got it. Thanks for the additional context!"
    assert result.messages[2:] == msgs
    assert result.messages_summarised == 0


def test_previous_summary_is_updated_not_resummarised() -> None:
    previous = (
        pi.COMPACTION_SUMMARY_PREFIX
        + "## Goal\n- ship v2\n\n<read-files>\n/old.py\n</read-files>"
        + pi.COMPACTION_SUMMARY_SUFFIX
    )
    msgs = [
        {"id": "sum", "timestamp": "t", "type": "user", "content": [{"text": previous}]},
        gemini(0, "Got it. Thanks for the additional context!"),
        user(1, "continue " + big(100_000)),
        gemini(1, "ok"),
        user(2, "more"),
        gemini(2, "done", total=10),
    ]
    prep = pi.prepare(msgs, 1000)
    assert prep is not None
    assert prep.previous_summary is not None
    assert prep.previous_summary.startswith("## Goal")
    assert prep.boundary_start == 2
    assert 0 not in prep.to_summarize
    assert prep.read_files == ["/old.py"]
    result = pi.PiStrategy().plan(msgs, OfflineSummarizer(), opts(force=True), now=NOW, new_id=ids())
    assert result.calls[0].previous_summary == prep.previous_summary
    assert "<previous-summary>" in result.calls[0].contents[0]["parts"][0]["text"]
    assert result.summary is not None
    assert "ship v2" in result.summary


def test_already_compacted_is_noop() -> None:
    msgs = [
        user(1, "a"),
        {
            "id": "sum",
            "timestamp": "t",
            "type": "user",
            "content": [{"text": pi.COMPACTION_SUMMARY_PREFIX + "x" + pi.COMPACTION_SUMMARY_SUFFIX}],
        },
    ]
    result = pi.PiStrategy().plan(msgs, OfflineSummarizer(), opts(force=True), now=NOW, new_id=ids())
    assert result.status == "NOOP"
    assert result.messages is None


def test_trigger_is_strict_and_checked_at_turn_ends() -> None:
    msgs = [
        user(1, "a"),
        gemini(1, "x", total=90_000),
        gemini(2, "y", total=83_616),
        user(2, "b"),
        gemini(3, "z", total=83_617),
    ]
    trig = pi.PiStrategy().trigger(msgs, opts(context_window=100_000))
    assert trig.limit == 100_000 - 16_384
    # g1 crosses but is not a turn end; g2 (turn end) equals the limit (strict >); g3 fires in turn 2.
    assert trig.would_trigger
    assert trig.turn == 2
    assert trig.message_id == "g3"
    not_forced = pi.PiStrategy().plan(
        msgs[:3], OfflineSummarizer(), opts(context_window=100_000), now=NOW, new_id=ids()
    )
    assert not_forced.status == "NOOP"


def test_serialize_conversation_truncates_tool_results() -> None:
    units = [
        s.Unit(0, "user", text="hi"),
        s.Unit(1, "assistant", text="t", thinking="th", calls=(s.ToolCallView("1", "ls", {"dir": "/a"}),)),
        s.Unit(1, "tool_result", text="r" * 2500),
    ]
    text = pi.serialize_conversation(units)
    assert text.startswith(
        '[User]: hi\n\n[Assistant thinking]: th\n\n[Assistant]: t\n\n[Assistant tool calls]: ls(dir="/a")'
    )
    assert text.endswith("r" * 10 + "\n\n[... 500 more characters truncated]")
