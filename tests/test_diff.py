"""ctxtool.diff: alignment, classification, token deltas and fact retention of two session files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxtool.common.errors import SessionFormatError
from ctxtool.compact import measure_history
from ctxtool.compress.gemini_cli import chat_compression as g
from ctxtool.diff import ACK_TEXT, align, diff_sessions, markdown, message_rows, summary_rows
from ctxtool.session.read import SessionFile, read_session
from tests.conftest import FIXTURES, REAL_SESSIONS, write_jsonl

HEADER = {
    "sessionId": "d1ff0000-0000-4000-8000-000000000000",
    "projectHash": "ab" * 32,
    "startTime": "2026-06-01T10:00:00.000Z",
    "lastUpdated": "2026-06-01T10:10:00.000Z",
    "kind": "main",
}
MODEL = "gemini-2.5-pro"
BIG_OUTPUT = "def main():\n" + "    x = 1\n" * 400
SNAPSHOT = (
    "<state_snapshot>\n<overall_goal>Fix the failing test in src/app.py.</overall_goal>\n"
    "<key_knowledge>`pytest -q` fails with AssertionError: expected 2, got 3.</key_knowledge>\n"
    "</state_snapshot>"
)


def _tokens(inp: int, out: int = 100) -> dict[str, int]:
    return {"input": inp, "output": out, "cached": inp // 2, "thoughts": 0, "tool": 0, "total": inp + out}


def _call(cid: str, name: str, args: dict[str, Any], output: str) -> dict[str, Any]:
    return {
        "id": cid,
        "name": name,
        "args": args,
        "result": [{"functionResponse": {"id": cid, "name": name, "response": {"output": output}}}],
        "status": "success",
        "timestamp": "2026-06-01T10:00:00.000Z",
    }


def original_messages() -> list[dict[str, Any]]:
    """A session with paths, commands, an error and a directive in its first turn (the part a compaction
    summarises) and two short turns after it."""
    return [
        {
            "id": "m01",
            "timestamp": "2026-06-01T10:00:01.000Z",
            "type": "user",
            "content": [{"text": "Fix the failing test in src/app.py. Never edit tests/legacy_test.py."}],
        },
        {
            "id": "m02",
            "timestamp": "2026-06-01T10:00:05.000Z",
            "type": "gemini",
            "content": "Reading the module and running the tests.",
            "model": MODEL,
            "tokens": _tokens(20_000),
            "toolCalls": [
                _call("read_file_1_0", "read_file", {"file_path": "src/app.py"}, BIG_OUTPUT),
                _call(
                    "run_shell_command_1_1",
                    "run_shell_command",
                    {"command": "pytest -q"},
                    "Command: pytest -q\nOutput: E   AssertionError: expected 2, got 3\nExit Code: 1",
                ),
                _call(
                    "read_file_1_2",
                    "read_file",
                    {"file_path": "docs/notes/design.md"},
                    "Design notes.",
                ),
            ],
        },
        {
            "id": "m03",
            "timestamp": "2026-06-01T10:01:00.000Z",
            "type": "gemini",
            "content": "The off-by-one is in `count()`.",
            "model": MODEL,
            "tokens": _tokens(26_000),
        },
        {
            "id": "m04",
            "timestamp": "2026-06-01T10:02:00.000Z",
            "type": "user",
            "content": [{"text": "Go ahead and fix it"}],
        },
        {
            "id": "m05",
            "timestamp": "2026-06-01T10:02:30.000Z",
            "type": "gemini",
            "content": "Fixed; re-running.",
            "model": MODEL,
            "tokens": _tokens(27_000),
            "toolCalls": [
                _call("grep_1_0", "grep_search", {"pattern": "count"}, "src/app.py:3: " + "x" * 900)
            ],
        },
        {
            "id": "m06",
            "timestamp": "2026-06-01T10:03:00.000Z",
            "type": "info",
            "content": "Request cancelled.",
        },
    ]


def compacted_messages(original: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a compaction writes: a snapshot user turn, the ack, then the tail with the same ids; the tail's
    grep output is truncated."""
    tail = [dict(m) for m in original[3:]]
    truncated = dict(tail[1])
    call = _call(
        "grep_1_0", "grep_search", {"pattern": "count"}, "src/app.py:3: " + "x" * 90 + " [truncated]"
    )
    truncated["toolCalls"] = [call]
    tail[1] = truncated
    return [
        {
            "id": "s01",
            "timestamp": "2026-06-01T10:05:00.000Z",
            "type": "user",
            "content": [{"text": SNAPSHOT}],
        },
        {"id": "s02", "timestamp": "2026-06-01T10:05:00.001Z", "type": "gemini", "content": ACK_TEXT},
        *tail,
    ]


def _write(path: Path, messages: list[dict[str, Any]]) -> SessionFile:
    return read_session(write_jsonl(path, [HEADER, *messages]))


@pytest.fixture
def pair(tmp_path: Path) -> tuple[SessionFile, SessionFile]:
    original = original_messages()
    return _write(tmp_path / "before.jsonl", original), _write(
        tmp_path / "after.jsonl", compacted_messages(original)
    )


def _fixture_files() -> list[Path]:
    chats = FIXTURES / "gemini" / "tmp"
    return sorted(p for p in chats.rglob("*.json*") if ".tmp" not in p.name and ".unreadable" not in p.name)


@pytest.mark.parametrize("path", _fixture_files(), ids=lambda p: p.name)
def test_a_session_against_itself_is_empty(path: Path) -> None:
    sf = read_session(path)
    d = diff_sessions(sf, read_session(path))
    assert not d.differs
    assert d.counts == {"removed": 0, "kept": len(sf.messages), "changed": 0, "added": 0}
    assert all(m.changes == () and m.match == "id" for m in d.messages) or not sf.messages
    assert d.retention is None
    assert d.snapshots == ()
    assert d.after.estimated == d.before.estimated
    assert d.after.recorded == d.before.recorded


def test_real_sessions_against_themselves() -> None:
    if not REAL_SESSIONS.is_dir():
        pytest.skip("shared/real-sessions is not present")
    checked = 0
    for path in sorted(REAL_SESSIONS.iterdir()):
        if path.suffix not in (".json", ".jsonl"):
            continue
        try:
            sf = read_session(path)
        except SessionFormatError:
            continue
        d = diff_sessions(sf, sf)
        assert not d.differs, path.name
        assert [m.before_index for m in d.messages] == list(range(len(sf.messages)))
        checked += 1
    assert checked > 10


def test_compaction_accounts_for_every_message_exactly_once(pair: tuple[SessionFile, SessionFile]) -> None:
    before, after = pair
    d = diff_sessions(before, after)
    befores = [m.before_index for m in d.messages if m.before_index is not None]
    afters = [m.after_index for m in d.messages if m.after_index is not None]
    assert sorted(befores) == list(range(len(before.messages)))
    assert sorted(afters) == list(range(len(after.messages)))
    assert [m.status for m in d.messages] == ["removed"] * 3 + ["added"] * 2 + ["kept", "changed", "kept"]
    assert d.counts == {"removed": 3, "kept": 2, "changed": 1, "added": 2}
    assert d.differs
    notes = [m.note for m in d.messages if m.status == "added"]
    assert notes == ["state snapshot", "compression ack"]
    assert d.snapshots == (SNAPSHOT,)


def test_truncated_tool_output_shows_how_much(pair: tuple[SessionFile, SessionFile]) -> None:
    d = diff_sessions(*pair)
    (changed,) = [m for m in d.messages if m.status == "changed"]
    (change,) = changed.changes
    assert change.field == "toolCalls[grep_1_0].result"
    assert change.before == len("src/app.py:3: ") + 900
    assert change.after == len("src/app.py:3: ") + 90 + len(" [truncated]")
    assert change.detail == "grep_search output truncated: 914 → 116 chars (-798)"
    assert changed.estimated_after is not None
    assert changed.estimated_before is not None
    assert changed.estimated_after < changed.estimated_before


def test_token_deltas(pair: tuple[SessionFile, SessionFile]) -> None:
    before, after = pair
    d = diff_sessions(before, after)
    # Recorded: the kept tail keeps its tokens; the two removed requests are gone from the after file.
    assert d.before.recorded["requests"] == 3
    assert d.after.recorded["requests"] == 1
    assert d.before.recorded["total"] - d.after.recorded["total"] == 20_100 + 26_100
    assert d.before.recorded["context"] == d.after.recorded["context"] == 27_000
    assert d.before.model == MODEL
    assert d.before.context_limit == 1_048_576
    assert d.before.recorded_context_share == pytest.approx(27_000 / 1_048_576)
    # Estimated: the 400-line read_file output is gone, so the estimate drops.
    assert d.after.estimated < d.before.estimated
    assert d.after.estimated_context_share == pytest.approx(d.after.estimated / 1_048_576)
    # Per group: the per-message estimates add up to each group's figures, and recorded by type.
    for side, ests in (("before", "estimated_before"), ("after", "estimated_after")):
        type_total = sum(g.as_dict()[ests] for g in d.groups if g.dimension == "type")
        role_total = sum(g.as_dict()[ests] for g in d.groups if g.dimension == "role")
        per_message = sum(getattr(m, ests) or 0 for m in d.messages)
        assert type_total == role_total == per_message, side
        # The session figure is the one measure compact and compare report (env turn included).
        sf = before if side == "before" else after
        assert getattr(d, side).estimated == measure_history(sf.messages, MODEL)
        turns = g.convert_session_to_client_history([dict(m) for m in sf.messages])
        whole = g.estimate_token_count([p for t in turns for p in t["content"].get("parts") or []])
        assert abs(whole - per_message) < 10
    tools = {g.key: g for g in d.groups if g.dimension == "tool"}
    assert set(tools) == {"read_file", "run_shell_command", "grep_search"}
    assert tools["read_file"].estimated_after == 0
    assert tools["read_file"].estimated_before > 900
    assert tools["read_file"].recorded_before is None
    gemini = next(g for g in d.groups if g.dimension == "type" and g.key == "gemini")
    assert (gemini.recorded_before, gemini.recorded_after) == (73_300, 27_100)


def test_fact_retention_lists_what_was_lost(pair: tuple[SessionFile, SessionFile]) -> None:
    d = diff_sessions(*pair)
    r = d.retention
    assert r is not None
    assert d.facts_from == 4  # 3 removed + the changed message's earlier version
    assert "src/app.py" in r.paths.kept
    assert "docs/notes/design.md" in r.paths.lost
    assert r.commands.kept == ("pytest -q",)
    assert r.errors.total == 1
    assert r.errors.kept  # the snapshot quotes the assertion
    assert r.directives.lost == ("Never edit tests/legacy_test.py.",)


def test_id_change_falls_back_to_content_hash(tmp_path: Path) -> None:
    original = original_messages()
    renamed = [dict(m) for m in original]
    renamed[3] = {**renamed[3], "id": "new-id", "timestamp": "2026-06-02T00:00:00.000Z"}
    d = diff_sessions(_write(tmp_path / "a.jsonl", original), _write(tmp_path / "b.jsonl", renamed))
    row = next(m for m in d.messages if m.before_index == 3)
    assert row.match == "hash"
    assert row.after_index == 3
    assert row.status == "changed"
    assert [c.field for c in row.changes] == ["id", "timestamp"]
    assert d.counts["changed"] == 1
    assert d.counts["kept"] == len(original) - 1


def test_views_render(pair: tuple[SessionFile, SessionFile]) -> None:
    d = diff_sessions(*pair)
    rows = message_rows(d)
    assert [r["status"] for r in rows][:3] == ["removed"] * 3
    assert rows[0]["estimate"].startswith("-")
    assert rows[3]["estimate"].startswith("+")
    text = markdown(d)
    assert "## ctxtool diff: sessions differ" in text
    assert "### State snapshot" in text
    assert SNAPSHOT.splitlines()[1] in text
    assert "lost: docs/notes/design.md" in text
    assert summary_rows(d)[0] == ("live messages", "6", "5", "-1")
    doc = d.as_dict()
    assert doc["schema_version"] == 3
    assert doc["counts"] == d.counts
    assert doc["tokens"]["recorded_delta"]["requests"] == -2
    assert doc["retention"]["directives"]["lost"] == ["Never edit tests/legacy_test.py."]


_ids = st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=8)


@settings(max_examples=60, deadline=None)
@given(_ids, _ids)
def test_alignment_is_a_partition(before_ids: list[str], after_ids: list[str]) -> None:
    before = [{"id": i, "type": "user", "content": i} for i in before_ids]
    after = [{"id": i, "type": "user", "content": i} for i in after_ids]
    pairs = align(before, after)
    assert sorted(i for i, _, _ in pairs if i is not None) == list(range(len(before)))
    assert [j for _, j, _ in pairs if j is not None] == list(range(len(after)))  # after order kept
    for i, j, how in pairs:
        if i is not None and j is not None:
            assert before[i]["id"] == after[j]["id"]
            assert how == "id"
        else:
            assert how is None


def test_diff_of_a_real_compaction(tmp_path: Path) -> None:
    """Compact a fixture with ``ctxtool.compact`` (offline summarizer) and account for every message."""
    import shutil
    from datetime import UTC, datetime

    from ctxtool.compact import CompactOptions, Destination, compact_session
    from ctxtool.compress.summarize.offline import OfflineSummarizer

    chats = tmp_path / "gemini" / "tmp" / "ctxdemo" / "chats"
    shutil.copytree(FIXTURES / "gemini" / "tmp" / "ctxdemo" / "chats", chats)
    source = chats / "session-2026-02-10T09-00-c0ffee01.json"
    report = compact_session(
        source,
        OfflineSummarizer(),
        CompactOptions(force=True),
        Destination("out", tmp_path / "out"),
        clock=lambda: datetime(2026, 8, 21, 10, 0, tzinfo=UTC),
        new_id=lambda: "00000000-0000-4000-8000-000000000001",
    )
    assert report.status == "COMPRESSED"
    assert report.output_path is not None
    before, after = read_session(source), read_session(report.output_path)
    d = diff_sessions(before, after)
    assert sorted(m.before_index for m in d.messages if m.before_index is not None) == list(
        range(len(before.messages))
    )
    assert sorted(m.after_index for m in d.messages if m.after_index is not None) == list(
        range(len(after.messages))
    )
    assert d.counts["kept"] + d.counts["changed"] == report.messages_kept
    assert d.counts["removed"] == len(before.messages) - report.messages_kept
    assert [m.note for m in d.messages if m.status == "added"] == ["state snapshot", "compression ack"]
    assert len(d.snapshots) == 1
    assert d.snapshots[0].startswith("<state_snapshot>")
    assert d.retention is not None
    assert d.after.estimated < d.before.estimated
