"""The reader: every era, the JSONL replay rules, the billed and live views, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from ctxtool.common.errors import SessionFormatError
from ctxtool.session.read import parse_session_bytes, read_session
from tests.conftest import write_jsonl

HEADER = {"sessionId": "s-1", "projectHash": "h", "startTime": "2026-05-01T10:00:00Z", "kind": "main"}


def user(mid: str, text: str = "hi") -> dict[str, object]:
    return {"id": mid, "timestamp": "2026-05-01T10:00:01Z", "type": "user", "content": [{"text": text}]}


def gemini(mid: str, tokens: dict[str, int] | None = None) -> dict[str, object]:
    msg: dict[str, object] = {
        "id": mid,
        "timestamp": "2026-05-01T10:00:02Z",
        "type": "gemini",
        "content": "ok",
    }
    if tokens is not None:
        msg["tokens"] = tokens
    return msg


def ids(messages: list[object]) -> list[str]:
    return [m["id"] for m in messages]  # type: ignore[index]


def test_legacy_pretty_document(tmp_path: Path) -> None:
    doc = {**HEADER, "messages": [user("u1"), gemini("g1", {"input": 10, "output": 2})]}
    path = tmp_path / "session-x.json"
    path.write_text(json.dumps(doc, indent=2))
    sf = read_session(path)
    assert sf.era == "json"
    assert ids(sf.messages) == ["u1", "g1"]
    assert ids(sf.billed) == ["u1", "g1"]
    assert sf.metadata["sessionId"] == "s-1"
    assert "messages" not in sf.metadata


def test_jsonl_upsert_keeps_first_position_and_last_copy(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "s.jsonl",
        [HEADER, user("u1"), gemini("g1"), user("u2"), gemini("g1", {"input": 7, "output": 1})],
    )
    sf = read_session(path)
    assert sf.era == "jsonl"
    assert ids(sf.messages) == ["u1", "g1", "u2"]
    assert sf.messages[1]["tokens"] == {"input": 7, "output": 1}


def test_set_merges_metadata_and_messages_checkpoint_replaces_live(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "s.jsonl",
        [
            HEADER,
            user("u1"),
            gemini("g1", {"input": 100}),
            {"$set": {"summary": "a title", "lastUpdated": "2026-05-01T11:00:00Z"}},
            {"$set": {"messages": [user("snap", "<state_snapshot>x</state_snapshot>"), gemini("ack")]}},
            user("u2"),
        ],
    )
    sf = read_session(path)
    assert sf.metadata["summary"] == "a title"
    assert ids(sf.messages) == ["snap", "ack", "u2"]
    # The checkpoint dropped g1 from the live history, but it was billed.
    assert ids(sf.billed) == ["u1", "g1", "snap", "ack", "u2"]
    assert sf.checkpoints == 1


def test_rewind_known_and_unknown_id(tmp_path: Path) -> None:
    records = [HEADER, user("u1"), gemini("g1", {"input": 5}), user("u2"), gemini("g2", {"input": 9})]
    sf = read_session(write_jsonl(tmp_path / "a.jsonl", [*records, {"$rewindTo": "u2"}, user("u3")]))
    assert ids(sf.messages) == ["u1", "g1", "u3"]
    assert ids(sf.billed) == ["u1", "g1", "u2", "g2", "u3"]
    assert sf.rewinds == 1
    sf = read_session(write_jsonl(tmp_path / "b.jsonl", [*records, {"$rewindTo": "nope"}]))
    assert sf.messages == []
    assert len(sf.billed) == 4


def test_billed_copy_without_tokens_keeps_recorded_tokens(tmp_path: Path) -> None:
    sf = read_session(
        write_jsonl(
            tmp_path / "s.jsonl", [HEADER, gemini("g1", {"input": 3}), {"$set": {"messages": [gemini("g1")]}}]
        )
    )
    assert sf.billed[0]["tokens"] == {"input": 3}
    assert "tokens" not in sf.messages[0]


def test_blank_and_broken_lines_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    body = b"\n".join([orjson.dumps(HEADER), b"", orjson.dumps(user("u1")), b'{"id": "g1", "type": "gem'])
    path.write_bytes(body + b"\n")
    sf = read_session(path)
    assert ids(sf.messages) == ["u1"]
    assert (sf.blank_lines, sf.broken_lines, sf.first_broken_line) == (1, 1, 4)


def test_sniffs_content_not_extension(tmp_path: Path) -> None:
    doc = {**HEADER, "messages": [user("u1")]}
    as_jsonl = tmp_path / "doc.jsonl"
    as_jsonl.write_text(json.dumps(doc, indent=2))
    assert read_session(as_jsonl).era == "json"
    header_only = tmp_path / "h.jsonl"
    header_only.write_bytes(orjson.dumps(HEADER))
    sf = read_session(header_only)
    assert sf.messages == []
    assert sf.session_id == "s-1"
    lines_as_json = write_jsonl(tmp_path / "lines.json", [HEADER, user("u1"), user("u2")])
    assert read_session(lines_as_json).era == "jsonl"
    assert len(read_session(lines_as_json).messages) == 2


def test_unknown_types_and_fields_are_kept(tmp_path: Path) -> None:
    odd = {"id": "b1", "type": "bob-shell", "content": "x", "newField": {"a": 1}}
    sf = read_session(write_jsonl(tmp_path / "s.jsonl", [HEADER, odd, {"unrelated": True}]))
    assert sf.messages[0]["type"] == "bob-shell"
    assert sf.unknown_records == 1


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "is empty"),
        (b"hello", "is not JSON"),
        (b'{"foo": 1}', "not a Gemini CLI session"),
        (b"[1, 2]", "not a Gemini CLI session"),
        (b'{\n  "sessionId": "x",\n  "messages": [\n    {"id": "a"', "truncated JSON document"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[" * 3000 + b"]" * 3000, "nested too deeply"),
        (b'{"sessionId": "x", "messages": 3}', "'messages' field that is not a list"),
    ],
)
def test_bad_input_names_the_file_and_the_problem(data: bytes, reason: str) -> None:
    with pytest.raises(SessionFormatError) as info:
        parse_session_bytes(data, "some/file.json")
    message = str(info.value)
    assert message.startswith("some/file.json: ")
    assert reason in message
    assert "\n" not in message


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.json"
    path.write_text("{}")

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(SessionFormatError, match=r"s\.json: cannot be read \(Permission denied\)"):
        read_session(path)


def test_enormous_line_is_read(tmp_path: Path) -> None:
    big = user("u1", "x" * 20_000_000)
    sf = read_session(write_jsonl(tmp_path / "s.jsonl", [HEADER, big]))
    assert len(sf.messages[0]["content"][0]["text"]) == 20_000_000  # type: ignore[index]
