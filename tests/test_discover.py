"""Discovery: the data root, the chats layout, subagent folders, skipped files, globs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxtool.session.discover import default_root, discover


def touch(path: Path, text: str = "{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_default_root_honours_gemini_cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_root({"GEMINI_CLI_HOME": str(tmp_path)}) == tmp_path / ".gemini" / "tmp"
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert default_root({}) == tmp_path / "h" / ".gemini" / "tmp"


def test_layout_scan(tmp_path: Path) -> None:
    root = tmp_path / ".gemini" / "tmp"
    chats = root / "abc" / "chats"
    main = touch(chats / "session-2026-01-01T00-00-aaaaaaaa.json")
    resumed = touch(chats / "session-2026-01-01T00-00-aaaaaaaa.jsonl")
    sub = touch(chats / "aaaaaaaa-1111" / "xs82vp.jsonl")
    skill = touch(chats / "skill-extraction-1a2b3c4d" / "p9m2zt.json")
    touch(chats / "session-2026-01-02T00-00-bbbbbbbb.jsonl.unreadable-1712345678901")
    touch(chats / "session-2026-01-02T00-00-bbbbbbbb.jsonl.tmp")
    touch(chats / "notes.json")  # not a session name at the top of chats/
    touch(root / "abc" / "tool-outputs" / "session-x" / "out.json")
    touch(root / "abc" / "logs.json")
    found = discover([tmp_path])
    paths = {f.path for f in found.files}
    assert paths == {main, resumed, sub, skill}
    assert sorted(r for _, r in found.skipped) == [
        "temporary file",
        "unreadable-file backup left by Gemini CLI",
    ]
    by_path = {f.path: f for f in found.files}
    assert by_path[sub].parent_ref == "aaaaaaaa-1111"
    assert by_path[main].group_key == by_path[resumed].group_key
    assert by_path[main].project == "abc"
    assert {f.path for f in discover([tmp_path], subagents=False).files} == {main, resumed}


def test_flat_folder_and_globs_and_missing(tmp_path: Path) -> None:
    a = touch(tmp_path / "flat" / "one.json")
    b = touch(tmp_path / "flat" / "two.jsonl")
    assert {f.path for f in discover([tmp_path / "flat"]).files} == {a, b}
    assert {f.path for f in discover([str(tmp_path / "flat" / "*.jsonl")]).files} == {b}
    found = discover([tmp_path / "nope", str(tmp_path / "*.none")])
    assert found.files == []
    assert len(found.missing) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert discover([empty]).empty_dirs == [empty]


def test_same_file_twice_is_read_once(tmp_path: Path) -> None:
    a = touch(tmp_path / "chats" / "session-x.json")
    assert len(discover([a, tmp_path, str(a)]).files) == 1


def test_relative_arguments_are_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    touch(tmp_path / "exports" / "a.jsonl")
    touch(tmp_path / "proj" / "chats" / "session-2026-01-01T00-00-abcd1234.jsonl")
    monkeypatch.chdir(tmp_path / "exports")
    loose = discover(["a.jsonl"]).files[0]
    assert loose.path == tmp_path / "exports" / "a.jsonl"
    assert loose.project == "exports"  # was "": the parent of a bare file name
    monkeypatch.chdir(tmp_path / "proj")
    (chat,) = discover(["chats"]).files
    assert chat.path.is_absolute()
    assert (chat.project, chat.project_dir) == ("proj", "proj")
    assert discover(["chats/"]).files[0].group_key == chat.group_key
