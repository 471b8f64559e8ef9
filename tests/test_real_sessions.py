"""ctxtool's reader and frames against the 43 real Gemini CLI session files in ../shared/real-sessions.

The expected numbers come from an independent fold written here with plain ``json`` (it does not import
ctxtool): the JSONL replay rules of Gemini CLI's ``loadConversationRecord`` (chatRecordingService.ts @
5411f113ca) as described in shared/spec/session-format.md, plus the billed view (every distinct message ever
recorded, the last copy of each id, in order of first appearance). Before the fold is trusted on real files
it is checked against the hand-derived expectations of the fixtures (fixtures/expected/manifest.json).

Skipped when the real-session folder is absent (as on a user's machine).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
REAL = Path(__file__).resolve().parents[2] / "shared" / "real-sessions"
FIXTURES = REPO / "fixtures"
MANIFEST = FIXTURES / "expected" / "manifest.json"
TOKEN_KEYS = ("input", "output", "cached", "thoughts", "tool", "total")
REAL_FILES = sorted(p for p in REAL.glob("*") if p.suffix in (".json", ".jsonl")) if REAL.is_dir() else []


# --- the independent fold -------------------------------------------------------------------------


@dataclass
class Fold:
    era: str
    metadata: dict[str, Any]
    live: list[dict[str, Any]]
    billed: list[dict[str, Any]]
    blank_lines: int = 0
    broken_lines: int = 0
    rewinds: int = 0
    checkpoints: int = 0


def fold(path: Path) -> Fold:
    """Replay one session file the way Gemini CLI's loader does, keeping the billed view beside it."""
    text = path.read_bytes().decode("utf-8")
    metadata: dict[str, Any] = {}
    live: dict[str, dict[str, Any]] = {}
    billed: dict[str, dict[str, Any]] = {}
    blank = broken = rewinds = checkpoints = 0
    saw_document = False

    def upsert(message: dict[str, Any]) -> None:
        live[message["id"]] = message
        billed[message["id"]] = message

    def replace_all(messages: list[Any]) -> None:
        live.clear()
        for m in messages:
            if isinstance(m, dict) and isinstance(m.get("id"), str):
                upsert(m)

    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        if not line.strip():
            blank += 1
            continue
        try:
            record = json.loads(line)
        except ValueError:
            broken += 1
            continue
        if not isinstance(record, dict):
            continue
        if "$rewindTo" in record:
            rewinds += 1
            ids = list(live)
            target = record["$rewindTo"]
            keep = ids[: ids.index(target)] if target in ids else []
            for key in ids[len(keep) :]:
                del live[key]
        elif "$set" in record:
            patch = record["$set"]
            if isinstance(patch, dict):
                for key, value in patch.items():
                    if key == "messages":
                        if isinstance(value, list):
                            checkpoints += 1
                            replace_all(value)
                    else:
                        metadata[key] = value
        elif isinstance(record.get("id"), str):
            upsert(record)
        elif "sessionId" in record:
            metadata.update({k: v for k, v in record.items() if k != "messages"})
            if isinstance(record.get("messages"), list):
                saw_document = True
                replace_all(record["messages"])

    if "sessionId" not in metadata or "projectHash" not in metadata:
        # parseLegacyRecordFallback: the whole file is one (pretty-printed) JSON document.
        doc = json.loads(text)
        messages = [m for m in doc.get("messages", []) if isinstance(m, dict)]
        meta = {k: v for k, v in doc.items() if k != "messages"}
        return Fold("json", meta, messages, list(messages))
    era = "json" if saw_document and len(lines) == 1 else "jsonl"
    return Fold(
        era, metadata, list(live.values()), list(billed.values()), blank, broken, rewinds, checkpoints
    )


def requests_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request is a ``gemini`` message carrying a tokens object (all-zero ones included)."""
    return [m for m in messages if m.get("type") == "gemini" and isinstance(m.get("tokens"), dict)]


def token_sums(messages: list[dict[str, Any]]) -> dict[str, int]:
    sums = dict.fromkeys(TOKEN_KEYS, 0)
    for m in requests_of(messages):
        for key in TOKEN_KEYS:
            value = m["tokens"].get(key)
            sums[key] += value if isinstance(value, int) else 0
    return sums


def tool_statuses(messages: list[dict[str, Any]]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for m in messages:
        calls = m.get("toolCalls")
        if isinstance(calls, list):
            counts.update(str(c.get("status")) for c in calls if isinstance(c, dict))
    return dict(counts)


# --- the fold itself, on hand-derived expectations ------------------------------------------------


def _manifest_files() -> dict[str, Any]:
    files: dict[str, Any] = json.loads(MANIFEST.read_text(encoding="utf-8"))["files"]
    return files


@pytest.mark.parametrize("rel", sorted(_manifest_files()))
def test_fold_agrees_with_hand_expectations(rel: str) -> None:
    """The fold is only a referee if it reproduces the numbers derived by hand for the fixtures."""
    want = _manifest_files()[rel]
    got = fold(FIXTURES / rel)
    assert got.era == want["era"]
    assert got.metadata.get("sessionId") == want["session_id"]
    assert len(got.live) == want["live_messages"]
    assert len(got.billed) == want["billed_messages"]
    assert (got.blank_lines, got.broken_lines) == (want["blank_lines"], want["broken_lines"])
    assert (got.rewinds, got.checkpoints) == (want["rewinds"], want["checkpoints"])
    for view, messages in (("billed", got.billed), ("live", got.live)):
        expected = want[view]
        assert len(requests_of(messages)) == expected["requests"], view
        assert token_sums(messages) == {k: expected[k] for k in TOKEN_KEYS}, view
        assert tool_statuses(messages) == expected["tool_calls"], view


# --- ctxtool against the fold, on the real files --------------------------------------------------

pytestmark_real = pytest.mark.skipif(not REAL.is_dir(), reason="shared/real-sessions is not present")


@pytestmark_real
def test_all_43_real_files_are_present() -> None:
    assert len(REAL_FILES) == 43


@pytestmark_real
@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.name[:60])
def test_reader_matches_independent_fold(path: Path) -> None:
    from ctxtool.session.read import read_session

    want = fold(path)
    got = read_session(path)
    assert got.metadata.get("sessionId") == want.metadata.get("sessionId")
    assert [m.get("id") for m in got.messages] == [m.get("id") for m in want.live]
    assert [m.get("id") for m in got.billed] == [m.get("id") for m in want.billed]
    assert (got.blank_lines, got.broken_lines) == (want.blank_lines, want.broken_lines)
    assert (got.rewinds, got.checkpoints) == (want.rewinds, want.checkpoints)
    live_got = [dict(m) for m in got.messages]
    billed_got = [dict(m) for m in got.billed]
    assert len(requests_of(live_got)) == len(requests_of(want.live))
    assert len(requests_of(billed_got)) == len(requests_of(want.billed))
    assert token_sums(live_got) == token_sums(want.live)
    assert token_sums(billed_got) == token_sums(want.billed)
    assert tool_statuses(billed_got) == tool_statuses(want.billed)


@pytest.fixture(scope="module")
def real_corpus() -> Any:
    from ctxtool.frames.build import load

    return load(REAL_FILES, workers=1)


@pytestmark_real
def test_frames_load_every_real_file(real_corpus: Any) -> None:
    assert real_corpus.problems == []
    assert real_corpus.files_read == 43
    # Flattened names: no two files share a chats/ folder and stem, so each file is its own session
    # (the three a2a-server files share a sessionId and must not be merged).
    assert real_corpus.sessions.height == 43
    assert sorted(real_corpus.sessions.get_column("file").to_list()) == sorted(str(p) for p in REAL_FILES)


@pytestmark_real
@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.name[:60])
def test_frames_match_independent_fold(real_corpus: Any, path: Path) -> None:
    import polars as pl

    want = fold(path)
    session = real_corpus.sessions.filter(pl.col("file") == str(path))
    assert session.height == 1
    row = session.row(0, named=True)
    key = row["session_key"]
    assert row["live_messages"] == len(want.live)
    assert row["billed_messages"] == len(want.billed)
    assert row["requests"] == len(requests_of(want.billed))
    assert row["live_requests"] == len(requests_of(want.live))
    assert {k: row[k] for k in TOKEN_KEYS} == token_sums(want.billed)

    requests = real_corpus.requests.filter(pl.col("session_key") == key)
    assert requests.height == len(requests_of(want.billed))
    assert requests.get_column("message_id").to_list() == [m["id"] for m in requests_of(want.billed)]
    live = requests.filter(pl.col("live"))
    assert live.get_column("message_id").to_list() == [m["id"] for m in requests_of(want.live)]
    assert {k: int(live.get_column(k).sum()) for k in TOKEN_KEYS} == token_sums(want.live)

    messages = real_corpus.messages.filter(pl.col("session_key") == key)
    assert messages.get_column("message_id").to_list() == [m["id"] for m in want.billed]
    assert int(messages.get_column("live").sum()) == len(want.live)

    calls = real_corpus.tool_calls.filter(pl.col("session_key") == key)
    assert dict(Counter(calls.get_column("status").to_list())) == tool_statuses(want.billed)


@pytestmark_real
def test_real_corpus_totals_match_fold(real_corpus: Any) -> None:
    folds = [fold(p) for p in REAL_FILES]
    want = dict.fromkeys(TOKEN_KEYS, 0)
    for f in folds:
        for k, v in token_sums(f.billed).items():
            want[k] += v
    assert real_corpus.requests.height == sum(len(requests_of(f.billed)) for f in folds)
    assert {k: int(real_corpus.requests.get_column(k).sum()) for k in TOKEN_KEYS} == want
