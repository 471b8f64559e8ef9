"""ctxtool's reader and frames against the hand-derived expectations in fixtures/expected/manifest.json.

Each fixture under fixtures/gemini/tmp exercises one Gemini CLI on-disk era or quirk (fixtures/README.md lists
them); the manifest holds what a careful reader of the fixture text gets by hand. Definitions used there:

* request: a ``gemini`` message carrying a ``tokens`` object (all-zero ones included; missing or null: no);
* billed view: every distinct message ever recorded in a file (last copy of each id, first position kept);
  live view: what Gemini CLI would resume (upserts, ``$set.messages`` and ``$rewindTo`` applied);
* prompt (starts a turn): a ``user`` message whose text is non-empty after trimming and does not start with
  ``/``, ``?``, ``<session_context>``, ``<hook_context>`` or ``<state_snapshot>``; ``request_turns`` is the
  number of prompts at or before each request, in billed order.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from ctxtool.frames.build import load
from ctxtool.frames.model import Corpus
from ctxtool.session.read import SessionFile, read_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MANIFEST: dict[str, Any] = json.loads((FIXTURES / "expected" / "manifest.json").read_text(encoding="utf-8"))
FILES: dict[str, Any] = MANIFEST["files"]
TOKEN_KEYS = ("input", "output", "cached", "thoughts", "tool", "total")
PAIRED = {rel for s in MANIFEST["sessions"] for rel in s["files"]}


def _requests(messages: list[Any]) -> list[Any]:
    return [m for m in messages if m.get("type") == "gemini" and isinstance(m.get("tokens"), dict)]


def _sums(messages: list[Any]) -> dict[str, int]:
    return {k: sum(int(m["tokens"].get(k) or 0) for m in _requests(messages)) for k in TOKEN_KEYS}


def _statuses(messages: list[Any]) -> dict[str, int]:
    return dict(Counter(c.get("status") for m in messages for c in (m.get("toolCalls") or [])))


# --- the manifest covers the tree -----------------------------------------------------------------


def test_manifest_lists_every_fixture_file() -> None:
    on_disk = {
        p.relative_to(FIXTURES).as_posix()
        for p in (FIXTURES / "gemini").rglob("*")
        if p.is_file() and p.name != ".project_root"
    }
    assert on_disk == set(FILES) | set(MANIFEST["skipped"])


def test_fixture_tree_is_small() -> None:
    size = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert size < 200_000


def test_manifest_corpus_totals_are_the_sum_of_its_sessions() -> None:
    """Guards the hand arithmetic: per-file numbers, with the json/jsonl pair counted once, add up."""
    single = [v for rel, v in FILES.items() if rel not in PAIRED]
    views = [v["billed"] for v in single] + [s["billed"] for s in MANIFEST["sessions"]]
    corpus = MANIFEST["corpus"]
    assert corpus["sessions"] == len(single) + len(MANIFEST["sessions"])
    assert corpus["files"] == len(FILES)
    assert corpus["requests"] == sum(v["requests"] for v in views)
    for key in TOKEN_KEYS:
        assert corpus[key] == sum(v[key] for v in views), key
    for view in views:
        assert view["total"] == view["input"] + view["output"] + view["thoughts"] + view["tool"]


# --- the reader, file by file ---------------------------------------------------------------------


@pytest.mark.parametrize("rel", sorted(FILES))
def test_reader(rel: str) -> None:
    want = FILES[rel]
    sf: SessionFile = read_session(FIXTURES / rel)
    assert sf.path == FIXTURES / rel
    assert sf.era == want["era"]
    assert sf.metadata.get("sessionId") == want["session_id"]
    assert sf.kind == want["kind"]
    for key, value in want["metadata"].items():
        assert sf.metadata.get(key) == value, key
    assert len(sf.messages) == want["live_messages"]
    assert len(sf.billed) == want["billed_messages"]
    if "live_ids" in want:
        assert [m.get("id") for m in sf.messages] == want["live_ids"]
    if "billed_ids" in want:
        assert [m.get("id") for m in sf.billed] == want["billed_ids"]
    assert sf.blank_lines == want["blank_lines"]
    assert sf.broken_lines == want["broken_lines"]
    assert sf.rewinds == want["rewinds"]
    assert sf.checkpoints == want["checkpoints"]
    for view, messages in (("billed", sf.billed), ("live", sf.messages)):
        rows = [dict(m) for m in messages]
        assert len(_requests(rows)) == want[view]["requests"], view
        assert _sums(rows) == {k: want[view][k] for k in TOKEN_KEYS}, view
        assert _statuses(rows) == want[view]["tool_calls"], view
    models = Counter(m.get("model") for m in _requests([dict(m) for m in sf.billed]))
    assert dict(models) == want["models"]


def test_last_copy_wins_and_keeps_first_position() -> None:
    sf = read_session(FIXTURES / "gemini/tmp/ctxdemo/chats/session-2026-04-20T10-00-e1e2e3e4.jsonl")
    second = sf.messages[1]
    assert second.get("id") == "d1000000-0000-4000-8000-000000000002"
    calls = second.get("toolCalls") or []
    # The third copy (appended after message 5, with its tool output masked) is the one kept, in slot 2.
    assert calls[0]["result"][0]["functionResponse"]["response"]["output"] == "[Tool output masked: 7 lines]"


# --- the frames, over the whole data root ---------------------------------------------------------


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load([FIXTURES], workers=1)


def _session_row(corpus: Corpus, rel: str) -> dict[str, Any]:
    paths = corpus.sessions.get_column("file").to_list()
    matches = [i for i, p in enumerate(paths) if Path(p).resolve() == (FIXTURES / rel).resolve()]
    assert len(matches) == 1, rel
    return corpus.sessions.row(matches[0], named=True)


def _expected_sessions() -> list[Any]:
    """(primary file, per-file expectation, session expectation) for every session in the tree."""
    out = []
    for rel, want in FILES.items():
        if rel not in PAIRED:
            out.append(pytest.param(rel, want, want, id=rel.rsplit("/", 2)[-1]))
    for s in MANIFEST["sessions"]:
        primary = s["files"][-1]  # the .jsonl Gemini CLI resumes is the session's file
        out.append(pytest.param(primary, FILES[primary], s, id="pair:" + primary.rsplit("/", 1)[-1]))
    return sorted(out, key=lambda p: str(p.values[0]))


def test_corpus_reads_every_fixture_and_skips_the_leftovers(corpus: Corpus) -> None:
    assert [p.message for p in corpus.problems] == []
    assert corpus.files_read == MANIFEST["corpus"]["files"]
    assert corpus.sessions.height == MANIFEST["corpus"]["sessions"]
    skipped = sorted(Path(p).resolve().relative_to(FIXTURES).as_posix() for p, _ in corpus.skipped)
    assert skipped == sorted(MANIFEST["skipped"])
    assert corpus.broken_lines == sum(v["broken_lines"] for v in FILES.values())


def test_corpus_totals(corpus: Corpus) -> None:
    want = MANIFEST["corpus"]
    assert corpus.requests.height == want["requests"]
    for key in TOKEN_KEYS:
        assert int(corpus.requests.get_column(key).sum()) == want[key], key
        assert int(corpus.sessions.get_column(key).sum()) == want[key], key


def test_subagents_can_be_left_out() -> None:
    without = load([FIXTURES], subagents=False, workers=1)
    assert without.sessions.height == MANIFEST["corpus"]["sessions_without_subagents"]
    assert without.requests.height == MANIFEST["corpus"]["requests_without_subagents"]
    assert set(without.sessions.get_column("kind").to_list()) == {"main"}


@pytest.mark.parametrize(("rel", "file_want", "want"), _expected_sessions())
def test_session_frames(corpus: Corpus, rel: str, file_want: dict[str, Any], want: dict[str, Any]) -> None:
    row = _session_row(corpus, rel)
    key = row["session_key"]
    assert row["session_id"] == file_want["session_id"]
    assert row["kind"] == file_want["kind"]
    assert row["project"] == file_want["project"]
    assert row["project_dir"] == file_want["project_dir"]
    assert row["summary"] == file_want["metadata"]["summary"]
    assert row["files"] == len(want.get("files", [rel]))
    assert row["live_messages"] == want["live_messages"]
    assert row["billed_messages"] == want["billed_messages"]
    billed, live = want["billed"], want["live"]
    assert row["requests"] == billed["requests"]
    assert row["live_requests"] == live["requests"]
    assert {k: row[k] for k in TOKEN_KEYS} == {k: billed[k] for k in TOKEN_KEYS}
    assert row["turns"] == billed["prompts"]
    assert row["rewinds"] == file_want["rewinds"]
    assert row["checkpoints"] == file_want["checkpoints"]
    assert row["broken_lines"] == file_want["broken_lines"]
    assert row["compression_infos"] == file_want["compressions"]["info"]
    assert row["snapshots"] == file_want["compressions"]["state_snapshot"]
    assert row["checkpoints"] == file_want["compressions"]["checkpoint"]

    parent = file_want["parent"]
    if parent is None:
        assert row["parent_session_key"] is None
    else:
        assert row["parent_session_key"] == _session_row(corpus, parent)["session_key"]

    requests = corpus.requests.filter(pl.col("session_key") == key).sort("position")
    assert requests.get_column("turn").to_list() == want["request_turns"]
    assert requests.get_column("session_id").unique().to_list() in ([], [file_want["session_id"]])
    live_requests = requests.filter(pl.col("live"))
    assert live_requests.height == live["requests"]
    assert {k: int(live_requests.get_column(k).sum()) for k in TOKEN_KEYS} == {k: live[k] for k in TOKEN_KEYS}
    assert dict(Counter(requests.get_column("model").to_list())) == file_want["models"]

    messages = corpus.messages.filter(pl.col("session_key") == key)
    assert messages.height == want["billed_messages"]
    assert int(messages.get_column("live").sum()) == want["live_messages"]
    assert int(messages.get_column("is_prompt").sum()) == billed["prompts"]
    assert int(messages.filter(pl.col("live")).get_column("is_prompt").sum()) == live["prompts"]
    assert int(messages.get_column("is_command").sum()) == billed["commands"]

    calls = corpus.tool_calls.filter(pl.col("session_key") == key)
    assert dict(Counter(calls.get_column("status").to_list())) == billed["tool_calls"]
    live_calls = calls.filter(pl.col("live"))
    assert dict(Counter(live_calls.get_column("status").to_list())) == live["tool_calls"]

    turns = corpus.turns.filter((pl.col("session_key") == key) & (pl.col("turn") > 0))
    assert turns.height == billed["prompts"]
    assert int(turns.get_column("requests").sum()) == sum(1 for t in want["request_turns"] if t > 0)


def test_a2a_server_files_stay_two_sessions(corpus: Corpus) -> None:
    a2a = corpus.sessions.filter(pl.col("session_id") == "a2a-server")
    assert a2a.height == 2
    assert a2a.get_column("session_key").n_unique() == 2
    # Both hold the constant <session_context> id; it must be counted once in each session.
    env = corpus.messages.filter(pl.col("message_id") == "d04923d38bb0f6017037e74183378ef4")
    assert env.height == 2
    assert not env.get_column("is_prompt").any()


def test_request_columns_and_derived_figures(corpus: Corpus) -> None:
    planned = {
        "session_key",
        "session_id",
        "message_id",
        "model",
        "timestamp",
        *TOKEN_KEYS,
        "live",
        "turn",
        "cost",
        "context_limit",
        "context_share",
        "cache_ratio",
    }
    assert planned <= set(corpus.requests.columns)
    for row in corpus.requests.iter_rows(named=True):
        assert row["context_limit"] > 0
        assert row["context_share"] == pytest.approx(row["input"] / row["context_limit"])
        if row["input"]:
            assert row["cache_ratio"] == pytest.approx(row["cached"] / row["input"])
        else:
            assert row["cache_ratio"] is None  # the all-zero request in the c0ffee01 session
