"""Session writing: JS-exact bytes, era round trips, atomic and checked replacement, backups."""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxtool.common.errors import OutputError
from ctxtool.common.jsvalue import js_number_to_string, js_stringify
from ctxtool.session.read import parse_session_bytes, read_session
from ctxtool.session.write import (
    FileChangedError,
    FileStamp,
    atomic_write,
    js_number,
    replace_checked,
    session_bytes,
    stringify,
    write_backup,
)
from tests.conftest import FIXTURES, REAL_SESSIONS

NOW = datetime(2026, 8, 21, 10, 0, 0, tzinfo=UTC)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"]), max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", "0", "10", "2", "01", "é", "z"]), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.floats(allow_nan=False))
@settings(max_examples=300)
def test_js_number_matches_the_port(x: float) -> None:
    expected = "null" if math.isinf(x) else js_number_to_string(x)
    assert js_number(x) == expected


@pytest.mark.parametrize(
    ("value", "text"),
    [(1e-6, "0.000001"), (1e16, "10000000000000000"), (1e21, "1e+21"), (1.5e-7, "1.5e-7"), (1.0, "1")],
)
def test_numbers_orjson_prints_differently(value: float, text: str) -> None:
    assert stringify({"x": value}) == f'{{"x":{text}}}'.encode()


@given(json_values)
@settings(max_examples=200)
def test_stringify_is_json_stringify(value: Any) -> None:
    assert stringify(value).decode() == js_stringify(value)
    assert stringify(value, indent=True).decode() == js_stringify(value, indent=2)


def test_integer_like_keys_come_first_as_in_js() -> None:
    assert stringify({"b": 1, "10": 2, "2": 3, "01": 4}) == b'{"2":3,"10":2,"b":1,"01":4}'


def fixture_files() -> list[Path]:
    return sorted(
        p for p in (FIXTURES / "gemini" / "tmp").rglob("*.json*") if p.name.endswith((".json", ".jsonl"))
    )


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: p.name)
def test_load_write_load_keeps_the_session(path: Path) -> None:
    session = read_session(path)
    data = session_bytes(session.era, session.metadata, session.messages)
    again = parse_session_bytes(data, path)
    assert again.era == session.era
    assert again.messages == session.messages
    assert again.metadata == session.metadata
    assert session_bytes(again.era, again.metadata, again.messages) == data  # canonical: a fixed point


def test_jsonl_layout_metadata_messages_scratchpad() -> None:
    meta = {"sessionId": "s", "projectHash": "h", "memoryScratchpad": {"k": 1}, "kind": "main"}
    msgs = [{"id": "1", "type": "user", "content": [{"text": "hi"}]}]
    assert session_bytes("jsonl", meta, msgs) == (
        b'{"sessionId":"s","projectHash":"h","kind":"main"}\n'
        b'{"id":"1","type":"user","content":[{"text":"hi"}]}\n'
        b'{"$set":{"memoryScratchpad":{"k":1}}}\n'
    )
    doc = session_bytes("json", {"sessionId": "s", "summary": "x", "lastUpdated": "t"}, msgs)
    assert not doc.endswith(b"\n")
    assert list(orjson.loads(doc)) == ["sessionId", "lastUpdated", "messages", "summary"]


real = pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="real sessions not present")


@real
def test_real_legacy_json_round_trips_byte_for_byte() -> None:
    checked = 0
    for path in sorted(REAL_SESSIONS.glob("*.json*")):
        data = path.read_bytes()
        session = read_session(path)
        if session.era != "json" or data.endswith(b"\n"):  # a trailing newline: not written by Gemini CLI
            continue
        assert session_bytes("json", session.metadata, session.messages) == data, path.name
        checked += 1
    assert checked >= 30


@real
def test_real_jsonl_messages_keep_their_original_bytes() -> None:
    checked = 0
    for path in sorted(REAL_SESSIONS.glob("*.jsonl")):
        session = read_session(path)
        if session.era != "jsonl":
            continue
        data = path.read_bytes()
        for message in session.messages:
            assert stringify(message) in data, (path.name, message.get("id"))
            checked += 1
    assert checked > 300


def test_atomic_write_exclusive_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "a" / "f.json"
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    with pytest.raises(OutputError, match=r"f\.json: cannot be written \(File exists\)\. It exists already"):
        atomic_write(target, b"three", exclusive=True)
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.json"]  # no temp file left


def test_replace_checked_replaces_an_unchanged_file(tmp_path: Path) -> None:
    target = tmp_path / "s.jsonl"
    target.write_bytes(b"old\n")
    stamp = FileStamp.of_file(target)
    replace_checked(target, b"new\n", stamp)
    assert target.read_bytes() == b"new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]


def test_replace_checked_refuses_a_file_that_changed(tmp_path: Path) -> None:
    target = tmp_path / "s.jsonl"
    target.write_bytes(b"old\n")
    stamp = FileStamp.of_file(target)

    def gemini_appends() -> None:
        with target.open("ab") as fh:
            fh.write(b"more\n")

    with pytest.raises(FileChangedError, match="changed on disk"):
        replace_checked(target, b"new\n", stamp, before_replace=gemini_appends)
    assert target.read_bytes() == b"old\nmore\n"
    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]


def test_replace_checked_notices_a_same_size_rewrite(tmp_path: Path) -> None:
    target = tmp_path / "s.json"
    target.write_bytes(b"aaaa")
    stamp = FileStamp.of_file(target)
    with pytest.raises(FileChangedError):
        replace_checked(target, b"new", stamp, before_replace=lambda: target.write_bytes(b"bbbb"))
    assert target.read_bytes() == b"bbbb"


def test_backups_never_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "session-x.jsonl"
    target.write_bytes(b"v1")
    first = write_backup(target, b"v1", NOW)
    second = write_backup(target, b"v2", NOW)
    assert first != second
    assert first.read_bytes() == b"v1"
    assert second.read_bytes() == b"v2"
    assert first.name.startswith("session-x.jsonl.ctxtool-backup-20260821T100000")


def test_written_files_get_normal_permissions(tmp_path: Path) -> None:
    fresh = tmp_path / "new.jsonl"
    atomic_write(fresh, b"x")
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask
    kept = tmp_path / "kept.jsonl"
    kept.write_bytes(b"old")
    kept.chmod(0o640)
    replace_checked(kept, b"new", FileStamp.of_file(kept))
    assert kept.stat().st_mode & 0o777 == 0o640
