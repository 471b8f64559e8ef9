"""Frames: session identity, subagents, turns, token semantics, views and reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxtool.frames.build import load
from ctxtool.frames.query import filter_corpus, live_only, report
from tests.conftest import write_jsonl


def header(sid: str, **extra: Any) -> dict[str, Any]:
    return {"sessionId": sid, "projectHash": "f" * 64, "startTime": "2026-05-01T10:00:00Z", **extra}


def user(mid: str, content: Any, ts: str = "2026-05-01T10:00:01Z") -> dict[str, Any]:
    return {"id": mid, "timestamp": ts, "type": "user", "content": content}


def gemini(
    mid: str, inp: int, out: int = 10, cached: int = 0, thoughts: int = 0, tool: int = 0, **extra: Any
) -> dict[str, Any]:
    tokens = {"input": inp, "output": out, "cached": cached, "thoughts": thoughts, "tool": tool}
    tokens["total"] = inp + out + thoughts + tool
    return {
        "id": mid,
        "timestamp": "2026-05-01T10:00:05Z",
        "type": "gemini",
        "content": "ok",
        "model": "gemini-2.5-pro",
        "tokens": tokens,
        **extra,
    }


@pytest.fixture
def chats(tmp_path: Path) -> Path:
    d = tmp_path / "tmp" / "proj" / "chats"
    d.mkdir(parents=True)
    (tmp_path / "tmp" / "proj" / ".project_root").write_text("/home/me/proj\n")
    return d


def test_json_and_resumed_jsonl_are_one_session(chats: Path) -> None:
    old = [user("u1", "first"), gemini("g1", 100)]
    (chats / "session-2026-05-01T10-00-aaaa1111.json").write_text(
        json.dumps({**header("aaaa1111-x"), "messages": old})
    )
    write_jsonl(
        chats / "session-2026-05-01T10-00-aaaa1111.jsonl",
        [header("aaaa1111-x"), *old, user("u2", "second"), gemini("g2", 300)],
    )
    corpus = load([chats])
    assert corpus.sessions.height == 1
    assert corpus.requests.get_column("input").to_list() == [100, 300]
    assert corpus.sessions.row(0, named=True)["project"] == "/home/me/proj"
    assert corpus.sessions.row(0, named=True)["files"] == 2


def test_constant_session_id_files_stay_separate(chats: Path) -> None:
    for name in ("session-2026-07-22T01-38-a2a-serv.jsonl", "session-2026-07-23T01-38-a2a-serv.jsonl"):
        write_jsonl(chats / name, [header("a2a-server"), user("u1", "hello"), gemini("g1", 50)])
    corpus = load([chats])
    assert corpus.sessions.height == 2
    assert report(corpus, "session").get_column("input").to_list() == [50, 50]


def test_subagents_roll_up_into_parent_and_can_be_excluded(chats: Path) -> None:
    parent_id = "b1f31681-4b57-4337-8bc5-ac73580f752a"
    write_jsonl(
        chats / "session-2026-05-01T10-00-b1f31681.jsonl",
        [header(parent_id), user("u1", "go"), gemini("g1", 1000)],
    )
    write_jsonl(
        chats / parent_id / "xs82vp.jsonl",
        [header("xs82vp", kind="subagent"), user("s1", "task"), gemini("s2", 400, cached=100)],
    )
    corpus = load([chats])
    assert corpus.sessions.filter(pl.col("kind") == "subagent").height == 1
    rows = report(corpus, "session")
    assert rows.height == 1
    assert rows.row(0, named=True)["input"] == 1400
    assert rows.row(0, named=True)["subagents"] == 1
    assert report(load([chats], subagents=False), "session").row(0, named=True)["input"] == 1000


def test_turns_follow_prompts_only(chats: Path) -> None:
    records = [
        header("t-1"),
        user("c0", [{"text": "<session_context>env</session_context>"}]),
        user("p1", [{"text": "build it"}]),
        gemini("g1", 100),
        user("r1", [{"functionResponse": {"name": "ls", "response": {"output": "a"}}}]),
        gemini("g2", 200),
        user("cmd", "/stats"),
        user("q", "?help"),
        user("empty", "   "),
        user("hook", "<hook_context>x</hook_context>"),
        gemini("g3", 250),
        user("p2", [{"text": ""}, {"inlineData": {"mimeType": "image/png", "data": "AA=="}}]),
        gemini("g4", 300),
    ]
    corpus = load([write_jsonl(chats / "session-2026-05-01T10-00-t1.jsonl", records)])
    turns = report(corpus, "turn")
    assert turns.get_column("turn").to_list() == [1, 2]
    assert turns.get_column("requests").to_list() == [3, 1]
    assert turns.get_column("input").to_list() == [550, 300]
    assert turns.get_column("peak_context").to_list() == [250, 300]
    assert turns.row(0, named=True)["prompt"] == "build it"


def test_token_semantics_and_cost(chats: Path) -> None:
    write_jsonl(
        chats / "session-2026-05-01T10-00-c1.jsonl",
        [header("c-1"), user("p1", "x"), gemini("g1", 1000, out=100, cached=400, thoughts=50, tool=5)],
    )
    row = load([chats]).requests.row(0, named=True)
    assert row["total"] == 1155  # input + output + thoughts + tool; cached is inside input
    assert row["cache_ratio"] == pytest.approx(0.4)
    assert row["context_share"] == pytest.approx(1000 / 1_048_576)
    # gemini-2.5-pro below 200k: $1.25/M uncached input and tool, $0.125/M cached, $10/M output and thoughts.
    expected = (600 + 5) * 1.25e-6 + 400 * 0.125e-6 + 150 * 10e-6
    assert row["cost"] == pytest.approx(expected, rel=1e-9)


def test_unknown_model_cost_is_null_with_warning(chats: Path) -> None:
    g = gemini("g1", 100)
    g["model"] = "auto-gemini-3"
    write_jsonl(chats / "session-2026-05-01T10-00-u1.jsonl", [header("u-1"), user("p1", "x"), g])
    corpus = load([chats])
    assert corpus.requests.row(0, named=True)["cost"] is None
    assert report(corpus, "session").row(0, named=True)["cost"] is None
    assert any("auto-gemini-3" in w for w in corpus.warnings)


def test_billed_and_live_views(chats: Path) -> None:
    records = [
        header("r-1"),
        user("p1", "one"),
        gemini("g1", 100),
        user("p2", "two"),
        gemini("g2", 200),
        {"$rewindTo": "p2"},
        user("p3", "three"),
        gemini("g3", 150),
    ]
    corpus = load([write_jsonl(chats / "session-2026-05-01T10-00-r1.jsonl", records)])
    assert corpus.requests.get_column("input").sum() == 450
    s = corpus.sessions.row(0, named=True)
    assert (s["rewinds"], s["context"], s["peak_context"]) == (1, 150, 150)
    live = live_only(corpus)
    assert live.requests.get_column("input").sum() == 250
    assert report(live, "turn").get_column("input").to_list() == [100, 150]


def test_compression_events_are_flagged(chats: Path) -> None:
    records = [
        header("k-1"),
        user("p1", "go"),
        gemini("g1", 600_000),
        {
            "id": "i1",
            "type": "info",
            "content": "Context compressed from 57% to 9%.",
            "timestamp": "2026-05-01T10:01:00Z",
        },
        {
            "$set": {
                "messages": [
                    user("snap", [{"text": "<state_snapshot>…</state_snapshot>"}]),
                    {"id": "ack", "type": "gemini", "content": "Got it. Thanks for the additional context!"},
                ]
            }
        },
        user("p2", "next"),
        gemini("g2", 90_000),
    ]
    corpus = load([write_jsonl(chats / "session-2026-05-01T10-00-k1.jsonl", records)])
    s = corpus.sessions.row(0, named=True)
    # One compression leaves three traces (info marker, snapshot message, checkpoint): counted once.
    assert (s["compressions"], s["compression_infos"], s["snapshots"], s["checkpoints"]) == (1, 1, 1, 1)
    assert report(corpus, "turn").get_column("compressed").to_list() == [True, False]


def test_filters_and_group_reports(chats: Path) -> None:
    write_jsonl(
        chats / "session-2026-05-01T10-00-d1.jsonl", [header("d-1"), user("p", "x"), gemini("g1", 10)]
    )
    g = gemini("g2", 20)
    g["timestamp"] = "2026-05-03T09:00:00Z"
    g["model"] = "gemini-2.5-flash"
    write_jsonl(chats / "session-2026-05-03T09-00-d2.jsonl", [header("d-2"), user("p", "x"), g])
    corpus = load([chats])
    assert report(corpus, "day").get_column("input").to_list() == [10, 20]
    assert report(corpus, "model").get_column("model").to_list() == ["gemini-2.5-flash", "gemini-2.5-pro"]
    assert report(corpus, "project").row(0, named=True)["sessions"] == 2
    from datetime import date

    later = filter_corpus(corpus, since=date(2026, 5, 2))
    assert report(later, "session").get_column("input").to_list() == [20]
    assert report(filter_corpus(corpus, sessions=["d-1"]), "request").height == 1


def test_context_limit_follows_gemini_cli_table(chats: Path) -> None:
    g = gemini("g1", 128_000)
    g["model"] = "gemma-4-31b-it"
    write_jsonl(
        chats / "session-2026-05-01T10-00-gm.jsonl", [header("gm"), user("p", "x"), g, gemini("g2", 10)]
    )
    rows = load([chats]).requests.select("model", "context_limit", "context_share").rows()
    assert rows == [("gemma-4-31b-it", 256_000, 0.5), ("gemini-2.5-pro", 1_048_576, 10 / 1_048_576)]


def test_a_turn_without_requests_costs_zero_not_unknown(chats: Path) -> None:
    records = [header("z-1"), user("p1", "first"), user("p2", "second"), gemini("g1", 100)]
    corpus = load([write_jsonl(chats / "session-2026-05-01T10-00-z1.jsonl", records)])
    costs = report(corpus, "turn").get_column("cost").to_list()
    assert costs[0] == 0.0
    assert costs[1] is not None
    assert costs[1] > 0


def test_pair_keeps_rows_only_the_legacy_file_has(chats: Path) -> None:
    call = {"id": "c1", "name": "ls", "status": "success", "result": "a"}
    old = [
        user("u1", "first"),
        gemini("g1", 100, toolCalls=[call]),
        gemini("g-only-json", 50, toolCalls=[call]),
    ]
    (chats / "session-2026-05-01T10-00-bbbb2222.json").write_text(
        json.dumps({**header("bbbb2222-x"), "messages": old})
    )
    write_jsonl(
        chats / "session-2026-05-01T10-00-bbbb2222.jsonl",
        [header("bbbb2222-x"), old[0], old[1], user("u2", "second"), gemini("g2", 300)],
    )
    corpus = load([chats])
    assert corpus.sessions.height == 1
    requests = corpus.requests.sort("position")
    assert requests.select("message_id", "input", "live").rows() == [
        ("g-only-json", 50, False),
        ("g1", 100, True),
        ("g2", 300, True),
    ]
    assert corpus.tool_calls.get_column("message_id").sort().to_list() == ["g-only-json", "g1"]
    assert corpus.messages.get_column("position").to_list() == list(range(5))


def test_rebuilt_history_keeps_what_each_request_recorded(chats: Path) -> None:
    """Gemini CLI's $set.messages checkpoint (compression, resume) rewrites messages without tokens,
    model and toolCalls; the billed view keeps the request as it was recorded."""
    call = {"id": "c1", "name": "read_file", "status": "error", "result": "boom"}
    records = [
        header("cp-1"),
        user("p1", "go"),
        gemini("g1", 1000, toolCalls=[call]),
        {
            "$set": {
                "messages": [user("p1", "go"), {"id": "g1", "type": "gemini", "content": [{"text": "ok"}]}]
            }
        },
        user("p2", "more"),
    ]
    corpus = load([write_jsonl(chats / "session-2026-05-01T10-00-cp1.jsonl", records)])
    row = corpus.requests.row(0, named=True)
    assert (row["model"], row["input"], row["tool_calls"], row["tool_errors"]) == (
        "gemini-2.5-pro",
        1000,
        1,
        1,
    )
    assert row["cost"] is not None
    assert corpus.tool_calls.get_column("name").to_list() == ["read_file"]
    from ctxtool.session.read import read_session

    billed = read_session(chats / "session-2026-05-01T10-00-cp1.jsonl").billed
    assert billed[1]["model"] == "gemini-2.5-pro"
    assert billed[1]["toolCalls"] == [call]


TIMES = [
    "2026-05-01T10:00:01.123Z",  # Gemini CLI (Date.toISOString)
    "2026-05-01T10:00:01Z",
    "2026-05-01T12:00:01.5+02:00",  # a fork's offset
    "2026-05-01T12:00:01+0200",
    "2026-05-01T10:00:01",  # no zone: taken as UTC
    "2026-05-01 10:00:01.25",
    "not a time",
    None,
]


def test_each_time_is_read_by_its_own_format() -> None:
    from tests.oracle.exprs import parse_times

    got = parse_times(pl.Series("t", TIMES, dtype=pl.String)).to_list()
    assert [None if t is None else t.isoformat() for t in got] == [
        "2026-05-01T10:00:01.123000+00:00",
        "2026-05-01T10:00:01+00:00",
        "2026-05-01T10:00:01.500000+00:00",
        "2026-05-01T10:00:01+00:00",
        "2026-05-01T10:00:01+00:00",
        "2026-05-01T10:00:01.250000+00:00",
        None,
        None,
    ]


@given(st.lists(st.sampled_from(TIMES), max_size=20), st.integers(min_value=0, max_value=20))
def test_a_time_parses_the_same_whatever_else_is_in_its_batch(times: list[str | None], cut: int) -> None:
    # Rows are decoded a batch at a time, in the order workers finish: parsing must not depend on neighbours.
    from tests.oracle.exprs import parse_times

    whole = parse_times(pl.Series("t", times, dtype=pl.String))
    parts = [parse_times(pl.Series("t", part, dtype=pl.String)) for part in (times[:cut], times[cut:])]
    assert whole.to_list() == pl.concat(parts).to_list()


def test_a_count_too_large_to_hold_is_left_empty_with_a_warning(chats: Path) -> None:
    path = chats / "session-2026-05-01T10-00-big.jsonl"
    write_jsonl(path, [header("big"), user("p", "hi"), gemini("g2", 123456789)])
    path.write_bytes(path.read_bytes().replace(b'"input":123456789', b'"input":' + str(2**70).encode()))
    corpus = load([chats])
    row = corpus.messages.filter(pl.col("message_id") == "g2").row(0, named=True)
    assert row["input"] is None
    assert row["output"] == 10
    assert any(
        w.startswith("1 value of column 'input' does not fit its type")
        and "it is left empty, so what it counts is missing from the totals" in w
        for w in corpus.warnings
    )


def test_turns_and_tool_calls_are_built_when_first_read(chats: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A report that reads neither (stats --by session) skips building them; reading one gives the frame
    # a build at once would have made, and builds it only once.
    from ctxtool.frames import corpus as built_from

    write_jsonl(
        chats / "session-2026-05-01T10-00-lazy.jsonl", [header("lazy"), user("u1", "hi"), gemini("g1", 100)]
    )
    built: list[str] = []
    turns = built_from._turns
    monkeypatch.setattr(built_from, "_turns", lambda *a: (built.append("turns"), turns(*a))[1])
    corpus = load([chats])
    report(corpus, "session")
    assert built == []
    first = corpus.turns
    assert corpus.turns is first
    assert built == ["turns"]
    assert first.select("turn", "requests", "input").rows() == [(1, 1, 100)]
    assert corpus.tool_calls.height == 0
