"""Splicing changed sessions into stored frames gives exactly what a full build gives."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from ctxtool.common.choices import BY_CHOICES
from ctxtool.frames.loading import load_corpus
from ctxtool.frames.model import Corpus
from ctxtool.frames.query import report
from tests.conftest import FIXTURES

CHATS = Path("ctxdemo") / "chats"


def same(a: Corpus, b: Corpus) -> None:
    for name in ("sessions", "messages", "requests", "tool_calls", "turns"):
        x, y = getattr(a, name), getattr(b, name)
        keys = [c for c in ("session_key", "position", "turn", "message_id", "call_id") if c in x.columns]
        assert_frame_equal(x.sort(keys, nulls_last=True), y.sort(keys, nulls_last=True), check_row_order=True)
    for by in BY_CHOICES:
        assert_frame_equal(report(a, by), report(b, by), check_row_order=False)
    assert (a.files_read, a.files_found, a.bytes_read, a.broken_lines) == (
        b.files_read,
        b.files_found,
        b.bytes_read,
        b.broken_lines,
    )
    assert sorted((p.path, p.message) for p in a.problems) == sorted((p.path, p.message) for p in b.problems)


def append(path: Path, *records: dict[str, object]) -> None:
    with open(path, "ab") as fh:
        for r in records:
            fh.write(orjson.dumps(r) + b"\n")


def reply(mid: str, inp: int) -> dict[str, object]:
    tokens = {"input": inp, "output": 7, "cached": 0, "thoughts": 0, "tool": 0, "total": inp + 7}
    return {"id": mid, "type": "gemini", "content": "ok", "model": "gemini-2.5-flash", "tokens": tokens}


def grow(root: Path) -> None:
    append(
        root / CHATS / "session-2026-05-25T09-30-c4e5f6a7.jsonl",
        {"id": "g1", "type": "user", "content": "more"},
        reply("g2", 900),
    )


def rewrite_legacy(root: Path) -> None:
    path = root / CHATS / "session-2026-02-10T09-00-c0ffee01.json"
    doc = json.loads(path.read_text())
    doc["messages"].append(reply("legacy-extra", 4242))
    path.write_text(json.dumps(doc, indent=2))


def delete_parent(root: Path) -> None:
    (root / CHATS / "session-2026-04-20T10-00-e1e2e3e4.jsonl").unlink()


def add_session(root: Path) -> None:
    header = {"sessionId": "new-session-1", "projectHash": "h", "startTime": "2026-09-01T00:00:00Z"}
    path = root / CHATS / "session-2026-09-01T00-00-newsess1.jsonl"
    path.write_bytes(orjson.dumps(header) + b"\n")
    append(path, {"id": "n1", "type": "user", "content": "hello"}, reply("n2", 77))


def add_subagent_of_new_session(root: Path) -> None:
    add_session(root)
    path = root / CHATS / "new-session-1" / "sub001.jsonl"
    path.parent.mkdir()
    path.write_bytes(orjson.dumps({"sessionId": "sub001", "projectHash": "h", "kind": "subagent"}) + b"\n")
    append(path, {"id": "s1", "type": "user", "content": "task"}, reply("s2", 55))


def break_a_file(root: Path) -> None:
    (root / CHATS / "session-2026-04-30T17-45-1c2d3e4f.json").write_text("{ not json")


def add_resumed_jsonl_of_legacy(root: Path) -> None:
    legacy = root / CHATS / "session-2026-02-10T09-00-c0ffee01.json"
    doc = json.loads(legacy.read_text())
    header = {k: v for k, v in doc.items() if k != "messages"}
    target = legacy.with_suffix(".jsonl")
    target.write_bytes(orjson.dumps(header) + b"\n")
    append(target, *doc["messages"], reply("after-resume", 31337))


@pytest.mark.parametrize(
    "change",
    [
        grow,
        rewrite_legacy,
        delete_parent,
        add_session,
        add_subagent_of_new_session,
        break_a_file,
        add_resumed_jsonl_of_legacy,
    ],
)
def test_an_incremental_load_equals_a_full_build(tmp_path: Path, change: Callable[[Path], None]) -> None:
    """After a change, only the files it touched are read again (the index serves the rest, a grown file is
    resumed), and the frames built equal those of a full read."""
    root = tmp_path / "tmp"
    shutil.copytree(FIXTURES / "gemini" / "tmp", root)
    cache = tmp_path / "cache"
    first, use = load_corpus([root], cache=True, cache_dir=cache)
    assert use.files_parsed == 16
    same(first, load_corpus([root])[0])
    change(root)
    spliced, use = load_corpus([root], cache=True, cache_dir=cache)
    assert use.files_parsed + use.files_resumed <= 3  # only the changed sessions were read again
    full, _ = load_corpus([root])
    same(spliced, full)
    again, use = load_corpus([root], cache=True, cache_dir=cache)
    assert use.corpus_hit or (change is break_a_file and use.files_parsed == 1)  # (a file that is no session
    same(again, full)  # is not kept: it is read again)


def test_many_changes_are_read_through_the_index(tmp_path: Path) -> None:
    root = tmp_path / "tmp"
    shutil.copytree(FIXTURES / "gemini" / "tmp", root)
    cache = tmp_path / "cache"
    load_corpus([root], cache=True, cache_dir=cache)
    grown = [p for p in sorted((root / CHATS).glob("*.jsonl")) if p.read_bytes().endswith(b"\n")][:3]
    for n, path in enumerate(grown):
        append(path, reply(f"extra-{n}", 1000 + n))
    corpus, use = load_corpus([root], cache=True, cache_dir=cache, workers=1)
    # Unchanged files are not read, grown ones resume.
    assert (use.files_cached, use.files_resumed, use.files_parsed) == (13, 3, 0)
    same(corpus, load_corpus([root])[0])


def test_a_grown_subagent_keeps_its_parent(tmp_path: Path) -> None:
    root = tmp_path / "tmp"
    shutil.copytree(FIXTURES / "gemini" / "tmp", root)
    cache = tmp_path / "cache"
    load_corpus([root], cache=True, cache_dir=cache)
    child = next((root / CHATS).glob("*-*-*-*-*/*.jsonl"))
    if not child.read_bytes().endswith(b"\n"):
        child.write_bytes(child.read_bytes() + b"\n")
    append(child, reply("sub-extra", 4321))
    spliced, use = load_corpus([root], cache=True, cache_dir=cache)
    assert not use.corpus_hit
    full, _ = load_corpus([root])
    same(spliced, full)
    row = spliced.requests.filter(pl.col("message_id") == "sub-extra").row(0, named=True)
    parent = spliced.sessions.filter(pl.col("session_key") == row["session_key"]).row(0, named=True)
    assert row["root_session_key"] == parent["parent_session_key"] is not None
