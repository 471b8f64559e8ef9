"""Every report, under any filter, derives its columns from the requests the filter keeps: the rows of
``--by day`` and ``--by session`` are the rows of ``--by request``, grouped (sums summed; the cache ratio of
the sums; the peak the largest prompt), over generated homes and the 43 real sessions.

Before, a session row under ``--since``, ``--until`` or ``--model`` showed the cache ratio and the peak
context of the session's whole history (13.6% in a row whose totals said 88.9%; a peak from a request the
filter excluded)."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxtool.cli import run
from tests.conftest import REAL_SESSIONS
from tests.test_tally import MODELS, homes

SUMMED = ("requests", "input", "output", "cached", "prompt_tokens", "thoughts", "tool", "total", "tool_calls")


def _report(capsys: pytest.CaptureFixture[bytes], root: Path, by: str, filters: list[str]) -> dict[str, Any]:
    capsys.readouterr()
    args = ["stats", str(root), "--by", by, "-f", "json", "--no-cache", "--no-subagents", *filters]
    assert run(args) == 0
    doc: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return doc


def _grouped(requests: list[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = collections.defaultdict(dict)
    for r in requests:
        g = out[r[key] if key != "day" else r["timestamp"][:10]]
        g["requests"] = g.get("requests", 0) + 1
        for col in SUMMED[1:]:
            g[col] = g.get(col, 0) + (r[col] or 0)
        if r["live"] or key != "session":  # a session's peak is of its live history (what a resume sends)
            peak = g.get("peak_context")
            g["peak_context"] = r["prompt_tokens"] if peak is None else max(peak, r["prompt_tokens"])
    for g in out.values():
        g["cache_ratio"] = g["cached"] / g["prompt_tokens"] if g["prompt_tokens"] > 0 else None
        g.setdefault("peak_context", None)
    return out


def assert_derived_from_kept_requests(
    capsys: pytest.CaptureFixture[bytes], root: Path, filters: list[str]
) -> None:
    requests = _report(capsys, root, "request", filters)["rows"]
    for by, key in (("day", "day"), ("session", "session")):
        doc = _report(capsys, root, by, filters)
        want = _grouped(requests, key)
        got = {row[by]: row for row in doc["rows"] if row.get("requests")}
        assert set(got) == set(want), (by, filters)
        for name, row in got.items():
            for col in (*SUMMED[:-1], "peak_context"):
                assert row[col] == want[name][col], (by, filters, name, col)
            if row["cache_ratio"] is None or want[name]["cache_ratio"] is None:
                assert row["cache_ratio"] == want[name]["cache_ratio"], (by, filters, name)
            else:
                want_ratio = pytest.approx(want[name]["cache_ratio"], rel=1e-12)
                assert row["cache_ratio"] == want_ratio, (by, filters, name)
        assert doc["totals"]["requests"] == len(requests), (by, filters)


_FILTERS = st.one_of(
    st.just([]),
    st.builds(lambda d: ["--since", d], st.sampled_from(["2026-02-15", "2026-04-20", "2026-06-01"])),
    st.builds(lambda d: ["--until", d], st.sampled_from(["2026-02-15", "2026-04-20", "2026-06-01"])),
    st.builds(lambda m: ["--model", m], st.sampled_from([m for m in MODELS if m] + ["gemini-2.5"])),
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(home=homes(), filters=_FILTERS)
def test_generated_homes(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[bytes],
    home: list[tuple[str, bytes]],
    filters: list[str],
) -> None:
    root = tmp_path_factory.mktemp("home") / "tmp"
    for name, data in home:
        if "/chats/" in name and name.count("/") > 2:
            continue  # subagents are rolled into their parent's row: this property is of sessions alone
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert_derived_from_kept_requests(capsys, root, filters)


@pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="../shared/real-sessions is not here")
@pytest.mark.parametrize(
    "filters",
    [
        [],
        ["--since", "2026-04-20"],
        ["--until", "2026-03-01"],
        ["--model", "gemini-3"],
        ["--model", "gemini-2.5-flash"],
        ["--model", "gemini-2.5-pro", "--since", "2026-03-01"],
    ],
    ids=lambda f: " ".join(f) or "unfiltered",
)
def test_real_sessions(capsys: pytest.CaptureFixture[bytes], filters: list[str]) -> None:
    assert_derived_from_kept_requests(capsys, REAL_SESSIONS, filters)


def _jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _answer(mid: str, model: str, tokens: int) -> dict[str, Any]:
    usage = {"input": tokens, "output": 1, "cached": 0, "thoughts": 0, "tool": 0, "total": tokens + 1}
    return {"id": mid, "type": "gemini", "timestamp": "2026-08-01T10:00:02.000Z", "content": "ok",
            "model": model, "tokens": usage}  # fmt: skip


def test_a_subagent_whose_parent_a_filter_leaves_out_keeps_its_requests(
    tmp_path: Path, capsys: pytest.CaptureFixture[bytes]
) -> None:
    """The parent's requests are all of one model, its subagent's of another: under ``--model`` the
    subagent's, rolled up into a parent the filter dropped, were lost from ``--by session``."""
    sid = "11111111-2222-4333-8444-555566667777"
    chats = tmp_path / "tmp" / "proj" / "chats"
    (chats / sid).mkdir(parents=True)
    meta = {"sessionId": sid, "projectHash": "a" * 64, "startTime": "2026-08-01T10:00:00.000Z"}
    prompt = {"id": "u1", "type": "user", "timestamp": "2026-08-01T10:00:01.000Z", "content": "go"}
    (chats / "session-2026-08-01T10-00-11111111.jsonl").write_bytes(
        _jsonl(meta, prompt, _answer("g1", "gemini-2.5-pro", 100))
    )
    sub = {**meta, "sessionId": "99999999-2222-4333-8444-555566667777", "kind": "subagent"}
    (chats / sid / "helper.jsonl").write_bytes(
        _jsonl(sub, prompt, _answer("s1", "gemini-2.5-flash", 40), _answer("s2", "gemini-2.5-flash", 50))
    )
    root = tmp_path / "tmp"
    for filters in ([], ["--model", "gemini-2.5-flash"], ["--model", "gemini-2.5-pro"]):
        capsys.readouterr()
        assert run(["stats", str(root), "--by", "request", "-f", "json", "--no-cache", *filters]) == 0
        requests = orjson.loads(capsys.readouterr().out)["rows"]
        assert run(["stats", str(root), "--by", "session", "-f", "json", "--no-cache", *filters]) == 0
        sessions = orjson.loads(capsys.readouterr().out)
        assert sum(r["requests"] for r in sessions["rows"]) == sessions["totals"]["requests"] == len(requests)
        assert sum(r["prompt_tokens"] for r in sessions["rows"]) == sum(r["prompt_tokens"] for r in requests)
