"""ctxtool.session.ids: the ids compact gives a legacy session's messages, and the .jsonl message records
without ids that Gemini CLI 0.61.0 skips on resume (chatRecordingService.ts ``loadConversationRecord``)."""

from __future__ import annotations

import re
from typing import Any

import orjson

from ctxtool.session.ids import derived_id, idless_lines, with_unique_ids
from ctxtool.session.read import parse_session_bytes

SID = "5e551011-0000-4000-8000-000000000000"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def msg(kind: str, text: str, mid: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"timestamp": "2026-08-01T00:00:00.000Z", "type": kind, "content": text}
    return out if mid is None else {"id": mid, **out}


def jsonl(*records: object) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def test_derived_ids_depend_on_session_and_position_only() -> None:
    assert derived_id(SID, 3) == derived_id(SID, 3)
    assert UUID.match(derived_id(SID, 3))
    assert len({derived_id(SID, 3), derived_id(SID, 4), derived_id("other", 3), derived_id(SID, 3, 1)}) == 4
    assert derived_id(None, 0) == derived_id("", 0)


def test_with_unique_ids_fills_in_and_keeps() -> None:
    messages = [msg("user", "a"), msg("gemini", "b", "g1"), msg("user", "c", 7), msg("gemini", "d", "g1")]
    fix = with_unique_ids(messages, SID)
    assert fix.missing == [0, 2]  # none, and a number (Gemini CLI needs a string)
    assert fix.repeated == [3]
    assert [m["id"] for m in fix.messages] == [
        derived_id(SID, 0),
        "g1",
        derived_id(SID, 2),
        derived_id(SID, 3),
    ]
    assert fix.messages[1] is messages[1]  # untouched messages are the same objects
    assert list(fix.messages[0]) == [
        "id",
        "timestamp",
        "type",
        "content",
    ]  # id first, as Gemini CLI writes it
    assert "id" not in messages[0]  # the input is not changed
    assert fix.describe().startswith(
        "2 messages had no id and 1 repeated an earlier message's id: each got an id derived from the "
        "session id and its position (the first is message 1 of the session)"
    )
    same = with_unique_ids(fix.messages, SID)
    assert not same.changed
    assert same.messages == fix.messages


def test_a_derived_id_never_takes_one_the_session_uses() -> None:
    taken = derived_id(SID, 1)
    fix = with_unique_ids([msg("user", "a", taken), msg("gemini", "b")], SID)
    assert [m["id"] for m in fix.messages] == [taken, derived_id(SID, 1, 1)]


def test_idless_lines_follow_the_replay() -> None:
    meta = {"sessionId": SID, "projectHash": "h"}
    # Lines 2 and 4 lack ids; line 3 has one.
    data = jsonl(meta, msg("user", "a"), msg("gemini", "b", "g"), msg("user", "c"))
    assert idless_lines(data) == [2, 4]
    # What ctxtool's own reader does with them: skipped, as Gemini CLI skips them.
    session = parse_session_bytes(data)
    assert [m["id"] for m in session.messages] == ["g"]
    assert session.unknown_records == 2
    # A rewind to "g" drops it and what follows it; a rewind to an unknown id drops everything.
    assert idless_lines(data + jsonl({"$rewindTo": "g"})) == [2]
    assert idless_lines(data + jsonl({"$rewindTo": "nowhere"})) == []
    # A checkpoint replaces what came before; its own entries without ids count, by its line.
    checkpoint = {"$set": {"messages": [msg("user", "x", "u"), msg("gemini", "y")]}}
    assert idless_lines(data + jsonl(checkpoint)) == [5]
    assert idless_lines(data + jsonl(checkpoint, {"$set": {"messages": []}})) == []
    # Records that are not messages are no concern: metadata, $set, an object without a type, broken lines.
    assert idless_lines(jsonl(meta, {"$set": {"summary": "s"}}, {"foo": 1}) + b"{broken\n\n") == []
    # Every message with an id: nothing to report.
    assert idless_lines(jsonl(meta, msg("user", "a", "u"), msg("gemini", "b", "g"))) == []
