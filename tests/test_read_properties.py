"""Property tests: the JSONL fold against a plain model of Gemini CLI's replay rules, and frame totals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxtool.frames.build import load
from ctxtool.session.read import parse_session_bytes

IDS = st.sampled_from([f"m{i}" for i in range(8)])
TOKENS = st.fixed_dictionaries(
    {
        "input": st.integers(0, 300_000),
        "output": st.integers(0, 5_000),
        "cached": st.integers(0, 100_000),
        "thoughts": st.integers(0, 5_000),
        "tool": st.integers(0, 100),
    }
)


@st.composite
def operations(draw: st.DrawFn) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["user", "gemini", "gemini", "set", "rewind", "checkpoint"]))
        if kind == "user":
            ops.append(
                {"id": draw(IDS), "type": "user", "content": [{"text": draw(st.sampled_from(["go", "/x"]))}]}
            )
        elif kind == "gemini":
            tokens = draw(TOKENS)
            tokens["total"] = tokens["input"] + tokens["output"] + tokens["thoughts"] + tokens["tool"]
            ops.append(
                {
                    "id": draw(IDS),
                    "type": "gemini",
                    "content": "ok",
                    "model": "gemini-2.5-pro",
                    "tokens": tokens,
                }
            )
        elif kind == "set":
            ops.append({"$set": {"lastUpdated": "2026-05-01T10:00:00Z"}})
        elif kind == "rewind":
            ops.append({"$rewindTo": draw(IDS)})
        else:
            # A rebuilt history (compression, resume): copies without tokens, model or tool calls.
            kinds = st.sampled_from(["user", "gemini"])
            rebuilt = [{"id": i, "type": draw(kinds), "content": "c"} for i in draw(st.lists(IDS))]
            ops.append({"$set": {"messages": rebuilt}})
    return ops


def carry(prev: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A later copy without tokens keeps the request the earlier copy recorded: tokens, model, tool calls."""
    if "tokens" in new or "tokens" not in prev:
        return new
    out = {**new, "tokens": prev["tokens"]}
    for key in ("model", "toolCalls"):
        if key not in new and key in prev:
            out[key] = prev[key]
    return out


def model_fold(ops: list[dict[str, Any]]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """An independent, deliberately naive statement of the rules: (live ids in order, billed by id)."""
    live: list[tuple[str, dict[str, Any]]] = []
    billed: dict[str, dict[str, Any]] = {}
    for op in ops:
        if "$rewindTo" in op:
            pos = next((i for i, (k, _) in enumerate(live) if k == op["$rewindTo"]), 0)
            live = live[:pos]
        elif "$set" in op:
            if "messages" in op["$set"]:
                live = []
                for m in op["$set"]["messages"]:
                    existing = [i for i, (k, _) in enumerate(live) if k == m["id"]]
                    if existing:
                        live[existing[0]] = (m["id"], m)
                    else:
                        live.append((m["id"], m))
                    billed[m["id"]] = carry(billed.get(m["id"], {}), m)
        else:
            existing = [i for i, (k, _) in enumerate(live) if k == op["id"]]
            if existing:
                live[existing[0]] = (op["id"], op)
            else:
                live.append((op["id"], op))
            billed[op["id"]] = carry(billed.get(op["id"], {}), op)
    return [k for k, _ in live], billed


HEADER = {"sessionId": "s", "projectHash": "h", "startTime": "2026-05-01T10:00:00Z"}


@settings(max_examples=150, deadline=None)
@given(operations())
def test_fold_matches_model(ops: list[dict[str, Any]]) -> None:
    data = b"".join(orjson.dumps(r) + b"\n" for r in [HEADER, *ops])
    sf = parse_session_bytes(data, "p.jsonl")
    live_ids, billed = model_fold(ops)
    assert [m["id"] for m in sf.messages] == live_ids
    assert {m["id"]: m for m in sf.billed} == billed
    # Every live message is billed, and the live view never holds more than the billed one.
    assert set(live_ids) <= set(billed)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations())
def test_frame_totals_equal_sum_of_request_tokens(tmp_path: Path, ops: list[dict[str, Any]]) -> None:
    path = tmp_path / "chats" / "session-2026-05-01T10-00-s.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [HEADER, *ops]))
    corpus = load([path])
    _, billed = model_fold(ops)
    requests = [m for m in billed.values() if m.get("type") == "gemini" and isinstance(m.get("tokens"), dict)]
    for key in ("input", "output", "cached", "thoughts", "tool", "total"):
        expected = sum(m["tokens"][key] for m in requests)
        assert corpus.requests.get_column(key).sum() == expected
        assert corpus.sessions.get_column(key).sum() == expected
        assert corpus.turns.get_column(key).sum() == expected
    assert corpus.requests.height == len(requests)


LINE_PARTS = [b"{}", b"", b" ", b"\t\r", b"\x0b", b"\x0c x", b'{"a":1}', b"\xff"]


@given(st.lists(st.sampled_from(LINE_PARTS), max_size=12))
def test_line_views_are_the_lines_and_blank_lines_are_the_same_ones(parts: list[bytes]) -> None:
    # The scan reads lines as views into the file's bytes; they must be split_lines' lines, blank where
    # bytes.isspace says so (the replay counts blank lines), with or without a final newline.
    from ctxtool.session.read import Event, Replayed, line_views, split_lines

    for data in (b"\n".join(parts), b"\n".join(parts) + b"\n"):
        views = list(line_views(data))
        assert [bytes(v) for v in views] == split_lines(data)
        seen: list[bytes] = []

        def classify(line: memoryview, seen: list[bytes] = seen) -> Event:
            seen.append(bytes(line))
            return "unknown", None, None

        r: Replayed[Any] = Replayed()
        r.feed(views, classify, lambda a, b: None)
        assert seen == [line for line in split_lines(data) if line and not line.isspace()]
        assert r.blank_lines == sum(1 for line in split_lines(data) if not line or line.isspace())
