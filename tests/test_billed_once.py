"""Compacting never changes what was billed; one meaning of tokens before (issue 13).

On a ~/.gemini/tmp laid out from the real sessions: ``stats`` totals (tokens, requests, cost; by day, model
and project) are identical to the token, request and cent after ``compact --as-new-session`` (both eras) and
``compact --in-place`` (both eras) of the largest sessions; ``compact --dry-run`` and ``compare`` report the
same tokens before for every real session.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxtool.cli import run
from tests.conftest import REAL_SESSIONS

pytestmark = pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="../shared/real-sessions is not here")

# The largest real sessions of each era (names as Gemini CLI wrote them: repo prefix dropped).
JSONL = (
    "TP-Tutor__session-2026-04-25T01-53-b1b4c413.jsonl",
    "TP-Tutor__session-2026-04-25T12-47-cdc6c5f9.jsonl",
)
JSON = (
    "aim__session-2026-03-18T15-22-ea9f470a.json",
    "Myflix__session-2026-02-24T16-56-cd7b13fa.json",
    "aim__session-2026-03-18T02-47-daa0ceb2.json",
)


def home(tmp_path: Path) -> Path:
    """Every real session file named session-*.json[l], in one project's chats folder."""
    chats = tmp_path / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    for src in sorted(REAL_SESSIONS.glob("*__session-*.json*")):
        shutil.copy2(src, chats / src.name.split("__", 1)[1])
    (tmp_path / "tmp" / "proj" / ".project_root").write_text("/work/proj")
    return chats


def stats(capsysbinary: pytest.CaptureFixture[bytes], root: Path, by: str) -> list[dict[str, Any]]:
    assert run(["stats", str(root), "--by", by, "--format", "json", "--no-cache"]) == 0
    rows: list[dict[str, Any]] = orjson.loads(capsysbinary.readouterr().out)["rows"]
    return rows


def billed(capsysbinary: pytest.CaptureFixture[bytes], root: Path) -> dict[str, Any]:
    """The billed figures a user reads: totals, and per day, model and project (tokens, requests, cents)."""
    keys = ("requests", "input", "output", "cached", "thoughts", "tool", "total")
    out: dict[str, Any] = {}
    for by in ("day", "model", "project"):
        out[by] = sorted(
            (str(r[by]), *(r[k] for k in keys), round(r["cost"] or 0, 2))
            for r in stats(capsysbinary, root, by)
        )
    sessions = stats(capsysbinary, root, "session")
    out["total"] = (
        *tuple(sum(r[k] for r in sessions) for k in keys),
        round(sum(r["cost"] or 0 for r in sessions), 2),
    )
    return out


def compact(capsys: pytest.CaptureFixture[bytes], *args: str) -> list[dict[str, Any]]:
    assert run(["compact", *args, "--force", "--format", "json"]) == 0, capsys.readouterr().err
    rows: list[dict[str, Any]] = orjson.loads(capsys.readouterr().out)["sessions"]
    return rows


def name(src: str) -> str:
    return src.split("__", 1)[1]


def test_compacting_changes_nothing_that_was_billed(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    chats = home(tmp_path)
    root = tmp_path / "tmp"
    before = billed(capsysbinary, root)
    assert before["total"][0] > 1000  # the real sessions' 2,000-odd requests

    # A new session beside the original: .jsonl, legacy .json, and legacy .json written as .jsonl.
    written = compact(
        capsysbinary, str(chats / name(JSONL[0])), str(chats / name(JSON[0])), "--as-new-session"
    )
    written += compact(capsysbinary, str(chats / name(JSON[1])), "--as-new-session", "--era", "jsonl")
    assert [r["status"] for r in written] == ["COMPRESSED"] * 3
    assert billed(capsysbinary, root) == before
    derived = {r["session_id"]: r for r in stats(capsysbinary, root, "session") if r["derived_from"]}
    assert set(derived) == {r["session_id"] for r in written}
    assert all(r["requests"] == 0 and r["cost"] == 0 for r in derived.values())

    # In place: a .jsonl gets one record more; a legacy .json stays and gets its .jsonl beside it.
    in_place = compact(capsysbinary, str(chats / name(JSONL[1])), str(chats / name(JSON[2])), "--in-place")
    assert [r["status"] for r in in_place] == ["COMPRESSED"] * 2
    assert billed(capsysbinary, root) == before
    # ...and the live view is the compacted history.
    [live] = [
        r for r in stats(capsysbinary, root, "session") if r["session"] == name(JSONL[1]).rsplit(".", 1)[0]
    ]
    assert live["compressions"] >= 1

    # Undo: the files are back to what they were, and so are the figures.
    assert run(["compact", "--undo", str(chats / name(JSONL[1])), str(chats / name(JSON[2]))]) == 0
    capsysbinary.readouterr()
    assert (chats / name(JSONL[1])).read_bytes() == (REAL_SESSIONS / JSONL[1]).read_bytes()
    assert not (chats / name(JSON[2])).with_suffix(".jsonl").exists()
    assert billed(capsysbinary, root) == before


@pytest.mark.parametrize(
    "source", sorted(p.name for p in REAL_SESSIONS.glob("*.json*")) if REAL_SESSIONS.is_dir() else []
)
def test_compact_and_compare_report_one_tokens_before(
    source: str, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = REAL_SESSIONS / source
    assert run(["compact", str(path), "--dry-run", "--format", "json"]) in (0, 1)
    compacted = orjson.loads(capsysbinary.readouterr().out)["sessions"][0]
    if compacted["status"] == "FAILED":
        pytest.skip(f"not a session compact reads: {compacted['error']}")
    assert run(["compare", str(path), "--strategies", "gemini-cli", "--format", "json"]) == 0
    compared = json.loads(capsysbinary.readouterr().out)
    rows = compared["rows"] if "rows" in compared else compared["sessions"]
    assert {r["tokens_before"] for r in rows} == {compacted["tokens_before"]}
