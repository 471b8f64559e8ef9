"""Large and growing files: streamed reads and resumed reads give exactly what a whole read gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from ctxtool.common.errors import SessionFormatError
from ctxtool.session import columns
from ctxtool.session.columns import (
    FileColumns,
    columns_from_bytes,
    columns_from_file,
    message_rows,
    tool_rows,
)
from ctxtool.session.discover import SessionPath
from tests.test_read_properties import HEADER, operations


def sp_for(path: Path) -> SessionPath:
    return SessionPath(path, "proj", "proj", None, str(path.with_suffix("")))


def same(a: FileColumns, b: FileColumns) -> None:
    for name in ("messages_cols", "tools_cols", "lines", "blank_lines", "broken_lines", "first_broken_line"):
        assert getattr(a, name) == getattr(b, name), name
    assert (a.session_id, a.live_messages, a.checkpoints) == (b.session_id, b.live_messages, b.checkpoints)


def lines(records: list[Any]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def test_streamed_read_equals_whole_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxtool.session import read

    src = (
        Path(__file__).parents[1]
        / "fixtures/gemini/tmp/ctxdemo/chats/session-2026-04-20T10-00-e1e2e3e4.jsonl"
    )
    path = tmp_path / "s.jsonl"
    path.write_bytes(src.read_bytes())
    whole = columns_from_bytes(path.read_bytes(), sp_for(path))
    monkeypatch.setattr(columns, "STREAM_MIN_BYTES", 1)
    real_iter = read.iter_file_lines
    monkeypatch.setattr(columns, "iter_file_lines", lambda fh: real_iter(fh, chunk_size=7))
    same(columns_from_file(sp_for(path)), whole)


def test_whole_document_too_large_for_memory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.json"
    path.write_text(
        json.dumps({**HEADER, "messages": [{"id": "a", "type": "user", "content": "x" * 5000}]}, indent=2)
    )
    monkeypatch.setattr(columns, "STREAM_MIN_BYTES", 1)
    monkeypatch.setattr(columns, "_available_memory", lambda: 1000)
    with pytest.raises(SessionFormatError, match=r"single 0\.0 GB JSON document and only 0\.0 GB of memory"):
        columns_from_file(sp_for(path))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations(), operations())
def test_resumed_read_equals_full_read(tmp_path: Path, first: list[Any], second: list[Any]) -> None:
    path = tmp_path / "grow.jsonl"
    path.write_bytes(lines([HEADER, *first]))
    before = columns_from_file(sp_for(path))
    assert before.resume_offset == path.stat().st_size
    with open(path, "ab") as fh:
        fh.write(lines(second))
    after = columns_from_file(sp_for(path), resume=before)
    full = columns_from_bytes(path.read_bytes(), sp_for(path))
    assert after.resumed == bool(second)
    same(after, full)
    assert after.live_order == full.live_order


def test_rewritten_file_is_read_again_not_resumed(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(lines([HEADER, {"id": "a", "type": "user", "content": "one"}]))
    before = columns_from_file(sp_for(path))
    path.write_bytes(
        lines([{**HEADER, "sessionId": "other"}, {"id": "b", "type": "user", "content": "two"}]) * 2
    )
    after = columns_from_file(sp_for(path), resume=before)
    assert not after.resumed
    same(after, columns_from_bytes(path.read_bytes(), sp_for(path)))


def test_a_half_written_last_line_gives_no_resume_point(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(lines([HEADER]) + b'{"id": "a", "ty')
    fc = columns_from_file(sp_for(path))
    assert fc.broken_lines == 1
    assert fc.resume_offset is None


def test_odd_field_types_are_read_leniently(tmp_path: Path) -> None:
    """Records a fork or a hand edit bent out of shape still count, as the full reader counts them."""
    from ctxtool.session.read import read_session

    odd = [
        HEADER,
        {"id": "u1", "type": "user", "content": "go", "timestamp": 12345},
        {
            "id": "g1",
            "type": "gemini",
            "content": "ok",
            "model": 7,
            "tokens": {"input": 10.0, "output": True},
        },
        {
            "id": "g2",
            "type": "gemini",
            "content": "x",
            "toolCalls": {"not": "a list"},
            "tokens": {"input": 5},
        },
        {"id": "g3", "type": "gemini", "content": "y", "toolCalls": ["str", {"name": "ls", "status": 3}]},
        {"id": 42, "type": "user", "content": "numeric id: not a message"},
        {"$set": {"messages": [{"id": "u1", "type": "user", "content": "go"}, "junk"], "summary": 5}},
    ]
    path = tmp_path / "odd.jsonl"
    path.write_bytes(lines(odd))
    fc = columns_from_file(sp_for(path))
    sf = read_session(path)
    rows = message_rows(fc)
    assert [r["message_id"] for r in rows] == [m["id"] for m in sf.billed]
    by_id = {r["message_id"]: r["input"] for r in rows}
    assert by_id == {"u1": None, "g1": 10, "g2": 5, "g3": None}  # g3 recorded no tokens
    assert {r["message_id"]: r["output"] for r in rows}["g1"] == 0
    assert [(t["name"], t["status"]) for t in tool_rows(fc)] == [("ls", None)]
    assert fc.live_order == ["u1"]
    assert fc.summary is None
    assert fc.unknown_records == 1


def test_byte_order_mark_and_crlf_are_read(tmp_path: Path) -> None:
    from ctxtool.session.read import read_session

    body = lines([HEADER, {"id": "g", "type": "gemini", "content": "x", "tokens": {"input": 7, "output": 2}}])
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + body.replace(b"\n", b"\r\n"))
    fc = columns_from_file(sp_for(path))
    (row,) = message_rows(fc)
    assert (row["input"], row["total"]) == (7, 9)  # a missing total is input + output + thoughts + tool
    assert fc.session_id == HEADER["sessionId"]
    assert fc.resume_offset is None  # offsets after a stripped mark would be off by three
    assert [m["id"] for m in read_session(path).messages] == ["g"]


@pytest.mark.parametrize("messages", ["5", '"x"', "{}", "false", "0", "[1, {}]", "null"])
@pytest.mark.parametrize("era", ["json", "jsonl-head"])
def test_both_readers_judge_a_document_alike(tmp_path: Path, messages: str, era: str) -> None:
    """The columns (stats) and the full reader (compact, diff) accept the same documents and refuse the others
    with the same words: a ``messages`` that is not a list once passed the columns' lenient parse."""
    from ctxtool.session.read import read_session

    doc = f'{{"sessionId": "s1", "startTime": "2026-01-01T00:00:00Z", "messages": {messages}}}'
    path = tmp_path / "session.json"
    path.write_text(doc if era == "json" else doc + "\n", encoding="utf-8")
    verdicts = []
    for reader in (lambda: columns_from_file(sp_for(path)), lambda: read_session(path)):
        try:
            reader()
            verdicts.append("read")
        except SessionFormatError as exc:
            verdicts.append(str(exc))
    assert verdicts[0] == verdicts[1]
    assert (verdicts[0] == "read") == (messages in ("[1, {}]", "null"))
