"""Every request is in one turn, and a session counts the turns `--by turn` lists; legacy flat subagent files
(``chats/session-<time>-<parent id8>.jsonl``, ``kind: "subagent"``) roll into the parent their name gives.

Sessions are written here in Gemini CLI's JSONL format: a metadata line, message records with ids,
``{"$rewindTo": id}`` and ``{"$set": {"messages": [...]}}`` checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

from ctxtool.cli import run
from ctxtool.frames.build import load
from ctxtool.frames.loading import load_corpus
from ctxtool.frames.model import Corpus
from ctxtool.frames.query import filter_corpus, live_only, report
from ctxtool.session.discover import resolve_session_args, short_id_of
from tests.conftest import FIXTURES, REAL_SESSIONS, write_jsonl

PARENT_ID = "c0c0c0c0-1111-4222-8333-444455556666"
SUB_ID = "5ab5ab5a-1111-4222-8333-444455556666"


def header(sid: str, kind: str = "main", start: str = "2026-05-01T10:00:00.000Z") -> dict[str, Any]:
    return {"sessionId": sid, "projectHash": "f" * 64, "startTime": start, "lastUpdated": start, "kind": kind}


def user(mid: str, text: str, ts: str = "2026-05-01T10:00:01.000Z") -> dict[str, Any]:
    return {"id": mid, "timestamp": ts, "type": "user", "content": [{"text": text}]}


def gemini(mid: str, inp: int, out: int = 10, ts: str = "2026-05-01T10:00:02.000Z") -> dict[str, Any]:
    tokens = {"input": inp, "output": out, "cached": 0, "thoughts": 0, "tool": 0, "total": inp + out}
    return {
        "id": mid,
        "timestamp": ts,
        "type": "gemini",
        "content": "ok",
        "model": "gemini-2.5-pro",
        "tokens": tokens,
    }


@pytest.fixture
def chats(tmp_path: Path) -> Path:
    d = tmp_path / "tmp" / "proj" / "chats"
    d.mkdir(parents=True)
    return d


def stats_rows(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> list[dict[str, Any]]:
    assert run(["stats", *args, "--format", "json", "--no-cache"]) == 0
    rows: list[dict[str, Any]] = orjson.loads(capsysbinary.readouterr().out)["rows"]
    return rows


# --- turns ------------------------------------------------------------------------------------------------


def test_after_a_rewind_the_live_view_counts_the_turns_it_lists(
    chats: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    write_jsonl(
        chats / "session-2026-05-01T10-00-aaaaaaaa.jsonl",
        [
            header("aaaaaaaa-0000"),
            user("u1", "first"),
            gemini("g1", 100),
            user("u2", "second", ts="2026-05-01T10:00:03.000Z"),
            gemini("g2", 200, ts="2026-05-01T10:00:04.000Z"),
            {"$rewindTo": "u2"},
        ],
    )
    for view, turns, requests in (([], 2, 2), (["--live"], 1, 1)):
        (session,) = stats_rows(capsysbinary, str(chats), "--by", "session", *view)
        turn_rows = stats_rows(capsysbinary, str(chats), "--by", "turn", *view)
        assert (session["turns"], session["requests"]) == (turns, requests), view
        assert len(turn_rows) == turns, view
        assert sum(r["requests"] for r in turn_rows) == requests, view
    assert [r["turn"] for r in stats_rows(capsysbinary, str(chats), "--by", "turn", "--live")] == [1]


def test_a_request_first_seen_in_a_checkpoint_is_in_a_turn(
    chats: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # The whole history arrives in a `$set.messages` checkpoint (as in the a2a server's files): its user
    # message is a copy, not a prompt, so the request is in turn 0, which is then a turn of the session.
    write_jsonl(
        chats / "session-2026-05-01T10-00-bbbbbbbb.jsonl",
        [header("bbbbbbbb-0000"), {"$set": {"messages": [user("u1", "first"), gemini("g1", 100)]}}],
    )
    for view in ([], ["--live"]):
        (session,) = stats_rows(capsysbinary, str(chats), "--by", "session", *view)
        (turn,) = stats_rows(capsysbinary, str(chats), "--by", "turn", *view)
        assert (session["requests"], session["turns"]) == (1, 1), view
        assert (turn["turn"], turn["requests"], turn["input"]) == (0, 1, 100), view


def test_a_request_first_seen_in_a_checkpoint_joins_the_turn_of_the_prompt_before_it(chats: Path) -> None:
    # A compression rewrites the history with new ids (Gemini CLI 0.61): the copies and a request recorded
    # only there belong to the turn of the prompt typed before them.
    write_jsonl(
        chats / "session-2026-05-01T10-00-cccccccc.jsonl",
        [
            header("cccccccc-0000"),
            user("u1", "first"),
            gemini("g1", 100),
            user("u2", "second", ts="2026-05-01T10:00:03.000Z"),
            {
                "$set": {
                    "messages": [
                        user("s1", "<state_snapshot>summary</state_snapshot>"),
                        user("c2", "second", ts="2026-05-01T10:00:03.000Z"),
                        gemini("g2", 300, ts="2026-05-01T10:00:04.000Z"),
                    ]
                }
            },
        ],
    )
    corpus = load([chats])
    assert corpus.requests.select("message_id", "turn").rows() == [("g1", 1), ("g2", 2)]
    for view in (corpus, live_only(corpus)):
        turns = report(view, "turn")
        (session,) = report(view, "session").iter_rows(named=True)
        assert session["turns"] == turns.height
        assert session["requests"] == turns.get_column("requests").sum()
    assert report(live_only(corpus), "turn").select("turn", "requests").rows() == [(2, 1)]


def _check_turns_add_up(view: Corpus, roll_up: bool, where: str) -> None:
    """Per session, the turn rows hold every request of the view and are as many as the session's turns;
    and the session report (rolled up or not) counts as many turns and requests as `--by turn` lists."""
    turns = view.turns
    per_session = turns.group_by("session_key").agg(
        pl.len().alias("rows"), pl.col("requests").sum().alias("in_turns")
    )
    requests = view.requests.group_by("session_key").agg(pl.len().alias("requests"))
    s = (
        view.sessions.select("session_key", "session", "turns")
        .join(per_session, on="session_key", how="left")
        .join(requests, on="session_key", how="left")
        .fill_null(0)
    )
    wrong = s.filter((pl.col("rows") != pl.col("turns")) | (pl.col("in_turns") != pl.col("requests")))
    assert wrong.height == 0, (where, wrong.rows())
    assert int(turns.get_column("requests").sum()) == view.requests.height, where
    sessions = report(view, "session", include_subagents_in_parent=roll_up)
    assert sessions.get_column("turns").sum() == report(view, "turn").height, where
    assert sessions.get_column("requests").sum() == view.requests.height, where


@pytest.mark.parametrize("subagents", [True, False], ids=["subagents", "no-subagents"])
def test_turns_add_up_over_the_fixtures(subagents: bool) -> None:
    corpus = load([FIXTURES], subagents=subagents, workers=1)
    assert corpus.requests.height > 0
    for name, view in (
        ("billed", corpus),
        ("live", live_only(corpus)),
        ("model", filter_corpus(corpus, models=["gemini-2.5-pro"])),
        ("model live", live_only(filter_corpus(corpus, models=["gemini-2.5-pro"]))),
    ):
        _check_turns_add_up(view, subagents, name)


@pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="shared/real-sessions is not present")
def test_turns_add_up_over_the_real_sessions() -> None:
    corpus = load([REAL_SESSIONS], workers=1)
    assert corpus.requests.height > 2000
    _check_turns_add_up(corpus, True, "billed")
    _check_turns_add_up(live_only(corpus), True, "live")


# --- legacy flat subagents --------------------------------------------------------------------------------


def write_parent_and_flat_subagent(chats: Path) -> tuple[Path, Path]:
    parent = write_jsonl(
        chats / f"session-2026-05-01T10-00-{PARENT_ID[:8]}.jsonl",
        [header(PARENT_ID), user("u1", "go"), gemini("g1", 1000, 100)],
    )
    sub = write_jsonl(
        chats / f"session-2026-05-01T10-01-{PARENT_ID[:8]}.jsonl",
        [
            header(SUB_ID, kind="subagent", start="2026-05-01T10:01:00.000Z"),
            user("s1", "task", ts="2026-05-01T10:01:01.000Z"),
            gemini("s2", 400, 40, ts="2026-05-01T10:01:02.000Z"),
        ],
    )
    return parent, sub


def test_short_id_is_taken_from_the_name_as_gemini_cli_takes_it() -> None:
    assert short_id_of("session-2026-05-01T10-00-c0c0c0c0.jsonl") == "c0c0c0c0"
    assert short_id_of("session-2026-05-01T10-00-a2a-serv.json") is None  # "a2a-serv" holds a "-"
    assert short_id_of("session-2026-05-01T10-00-c0c0c0.jsonl") is None  # not 8 characters
    assert short_id_of("xs82vp.jsonl") is None  # a nested subagent's name
    assert short_id_of("session-2026-05-01T10-00-c0c0c0c0.txt") is None


def test_a_flat_subagent_file_rolls_into_the_parent_its_name_gives(
    chats: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    write_parent_and_flat_subagent(chats)
    corpus = load([chats])
    sub = corpus.sessions.filter(pl.col("session_id") == SUB_ID).row(0, named=True)
    parent = corpus.sessions.filter(pl.col("session_id") == PARENT_ID).row(0, named=True)
    assert sub["kind"] == "subagent"
    assert sub["parent_session_key"] == parent["session_key"]
    assert parent["subagents"] == 1

    (row,) = stats_rows(capsysbinary, str(chats), "--by", "session")
    assert row["session_id"] == PARENT_ID
    assert (row["subagents"], row["requests"], row["turns"]) == (1, 2, 2)
    assert (row["prompt_tokens"], row["output"], row["total"]) == (1400, 140, 1540)
    assert len(stats_rows(capsysbinary, str(chats), "--by", "turn")) == 2

    (alone,) = stats_rows(capsysbinary, str(chats), "--by", "session", "--no-subagents")
    assert alone["session_id"] == PARENT_ID
    assert (alone["subagents"], alone["requests"], alone["turns"]) == (0, 1, 1)
    assert (alone["prompt_tokens"], alone["output"], alone["total"]) == (1000, 100, 1100)
    assert [r["session"] for r in stats_rows(capsysbinary, str(chats), "--by", "turn", "--no-subagents")] == [
        f"session-2026-05-01T10-00-{PARENT_ID[:8]}"
    ]
    # --session with the parent's id brings its subagent along, as for nested subagent files.
    (picked,) = stats_rows(capsysbinary, str(chats), "--by", "session", "--session", PARENT_ID[:8])
    assert picked["total"] == 1540


def test_a_flat_subagent_without_its_parent_stays_a_session_and_no_subagents_drops_it(
    chats: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # As in a real file: a flat subagent named with its own short id, no session of that id beside it.
    write_jsonl(
        chats / f"session-2026-05-01T10-01-{SUB_ID[:8]}.jsonl",
        [header(SUB_ID, kind="subagent"), user("s1", "task"), gemini("s2", 400)],
    )
    write_jsonl(
        chats / "session-2026-05-01T10-00-dddddddd.jsonl",
        [header("dddddddd-0000"), user("u1", "go"), gemini("g1", 1000)],
    )
    rows = stats_rows(capsysbinary, str(chats), "--by", "session")
    assert sorted((r["session_id"], r["kind"], r["requests"]) for r in rows) == [
        (SUB_ID, "subagent", 1),
        ("dddddddd-0000", "main", 1),
    ]
    (alone,) = stats_rows(capsysbinary, str(chats), "--by", "session", "--no-subagents")
    assert (alone["session_id"], alone["requests"]) == ("dddddddd-0000", 1)


def test_the_index_and_a_grown_flat_subagent_give_what_a_full_read_gives(chats: Path, tmp_path: Path) -> None:
    _, sub = write_parent_and_flat_subagent(chats)
    cache = tmp_path / "cache"

    def totals(subagents: bool) -> list[tuple[Any, ...]]:
        fresh = report(load([chats], subagents=subagents), "session", include_subagents_in_parent=subagents)
        for _ in range(2):  # a first run that fills the index, then one served from it
            cached, _use = load_corpus([chats], subagents=subagents, cache=True, cache_dir=cache)
            got = report(cached, "session", include_subagents_in_parent=subagents)
            assert (
                got.select("session_id", "turns", "requests", "total").rows()
                == fresh.select("session_id", "turns", "requests", "total").rows()
            )
        return fresh.select("session_id", "turns", "requests", "total").rows()

    assert totals(True) == [(PARENT_ID, 2, 2, 1540)]
    assert totals(False) == [(PARENT_ID, 1, 1, 1100)]
    with sub.open("ab") as fh:  # Gemini CLI appends to the subagent's file: only it is read again
        fh.write(orjson.dumps(gemini("s3", 500, 50, ts="2026-05-01T10:01:03.000Z")) + b"\n")
    assert totals(True) == [(PARENT_ID, 2, 3, 2090)]
    assert totals(False) == [(PARENT_ID, 1, 1, 1100)]


def test_a_short_id_names_the_parent_not_its_flat_subagent(chats: Path) -> None:
    parent, _ = write_parent_and_flat_subagent(chats)
    root = chats.parent.parent
    assert resolve_session_args([PARENT_ID[:8]], roots=[root]) == [str(parent)]
    assert resolve_session_args([PARENT_ID], roots=[root]) == [str(parent)]


@pytest.mark.parametrize("command", [["compact", "--dry-run"], ["compare"], ["diff", "c0c0c0c0"], ["audit"]])
def test_an_id_cut_too_short_is_said_to_be_one_with_its_fix(
    tmp_path: Path, command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ctxtool compact 4dd``: three characters name no file and are too few to be taken for a session id;
    every command that takes ids says both, and what to pass instead (a usage error, as an unknown id)."""
    chats = tmp_path / ".gemini" / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    write_parent_and_flat_subagent(chats)
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path))
    monkeypatch.chdir(chats)
    assert resolve_session_args(["c0c0"]) != ["c0c0"]  # four characters: an id
    budget = ["--max-session-tokens", "1M", "--no-config"] if command == ["audit"] else []
    assert run([*command, "c0c", *budget]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "Error: c0c names no file, and a session id takes 4 characters or more. Pass a session file, a chats/"
        " folder, or a longer start of an id from `ctxtool stats`"
    ]
