"""What fills the context (issue 17): the ``ctx_*`` parts of each request add up to its recorded prompt,
the overhead is never negative, the history estimate explains the recorded prompt on real sessions, events
are marked, and ``stats --top`` names the largest items."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxtool.cli import run
from ctxtool.frames.build import load
from ctxtool.frames.model import COMPOSITION_COLUMNS
from ctxtool.measure.estimator import estimate_text, estimate_token_count

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
REAL = ROOT.parent / "shared" / "real-sessions"


def _check_parts(requests: pl.DataFrame) -> None:
    parts = requests.select(pl.sum_horizontal(*COMPOSITION_COLUMNS)).to_series()
    assert (parts - requests.get_column("context")).abs().max() <= 1
    for col in COMPOSITION_COLUMNS:
        assert requests.get_column(col).min() >= 0, col


def test_parts_add_up_on_fixtures() -> None:
    corpus = load([FIXTURES])
    _check_parts(corpus.requests)
    turns = corpus.turns
    assert turns.select(pl.sum_horizontal(*COMPOSITION_COLUMNS)).to_series().sum() == turns["input"].sum()


def test_tool_output_lands_in_tool_io() -> None:
    corpus = load([FIXTURES])
    with_tools = corpus.requests.filter(pl.col("ctx_tool_io") > 0)
    assert with_tools.height > 0
    # a request after a tool call carries the call's output in its history
    assert (with_tools["ctx_tool_io"] > 0).all()


def test_events_are_marked() -> None:
    rows = load([FIXTURES]).requests
    events = {e for value in rows.get_column("event").drop_nulls() for e in value.split(",")}
    assert {"compression", "rewind", "model"} <= events


@pytest.mark.skipif(not REAL.exists(), reason="../shared/real-sessions is absent")
def test_real_sessions_overhead_and_estimate() -> None:
    requests = load([REAL]).requests.filter(pl.col("context") > 0)
    _check_parts(requests)
    assert requests.height > 1000
    # The raw history estimate (unscaled) must stay within the recorded prompt on at least 95% of requests:
    # the overhead before scaling, context - history estimate, is >= 0 there.
    corpus = load([REAL])
    hist = corpus.messages.filter(
        (pl.col("type") == "gemini") & pl.col("input").is_not_null() & (pl.col("input") > 0)
    ).select(
        ok=(pl.col("input") - pl.col("hist_prompts") - pl.col("hist_model") - pl.col("hist_tool_io")) >= 0
    )
    share = hist.get_column("ok").mean()
    assert isinstance(share, float)
    assert share >= 0.95, share


def test_stats_by_request_json_has_composition(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run(["stats", str(FIXTURES), "--by", "request", "-f", "json", "--no-cache"]) == 0
    doc = orjson.loads(capsysbinary.readouterr().out)
    for row in doc["rows"]:
        assert sum(row[c] for c in COMPOSITION_COLUMNS) == row["context"]
    assert "ctx_tool_io" in doc["totals"]


def test_stats_top(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run(["stats", str(FIXTURES), "--top", "3", "-f", "json", "--no-cache"]) == 0
    rows = orjson.loads(capsysbinary.readouterr().out)["rows"]
    assert rows
    by_session: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        by_session.setdefault(str(row["session"]), []).append(row)
    for items in by_session.values():
        assert len(items) <= 3
        tokens = [int(str(r["tokens"])) for r in items]
        assert tokens == sorted(tokens, reverse=True)
    assert any(r["item"] == "tool output" and r["target"] for r in rows)


def test_stats_top_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["stats", str(FIXTURES), "--top", "2", "--width", "100", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "overhead" in out
    assert "estimates" in out


def test_ctx_percent_has_one_meaning_the_share_of_the_limit(capsys: pytest.CaptureFixture[str]) -> None:
    """``ctx %`` is a share of the model's limit (``context_share``) in every table; ``--top``'s share of the
    request's context is headed ``of ctx``, and says so under the table."""
    assert run(["stats", str(FIXTURES), "--top", "2", "--wide", "--no-cache"]) == 0
    top = capsys.readouterr().out
    header = next(line for line in top.splitlines() if "~tokens" in line)
    assert header.split("┃")[-1].strip() == "of ctx"
    assert "ctx %" not in header
    assert "of ctx: the share of that request's context (ctx %, elsewhere: of the limit)." in top
    for by in ("turn", "request", "session"):
        assert run(["stats", str(FIXTURES), "--by", by, "--wide", "--no-cache", "--width", "400"]) == 0
        table = capsys.readouterr().out.splitlines()
        head = [c.strip() for c in next(line for line in table if "┃" in line).split("┃")]
        assert "of ctx" not in head
        column = head.index("ctx %")
        assert run(["stats", str(FIXTURES), "--by", by, "--format", "json", "--no-cache"]) == 0
        rows = orjson.loads(capsys.readouterr().out)["rows"]
        shown = [line.split("│")[column].strip() for line in table if line.count("│") >= column][: len(rows)]
        assert shown == [
            "–" if r["context_share"] is None else f"{100 * r['context_share']:.1f}%" for r in rows
        ], by


def test_top_and_by_conflict() -> None:
    assert run(["stats", str(FIXTURES), "--top", "2", "--by", "request"]) == 2


@given(st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=300))
def test_estimate_text_is_the_estimator_on_one_text_part(text: str) -> None:
    """Lone surrogates included, with the counts of the compiled kernel (when built) and of Python."""
    from ctxtool.common.jsvalue import utf16_counts, utf16_counts_pure
    from ctxtool.measure import estimator

    for counts in (utf16_counts, utf16_counts_pure):
        estimator.utf16_counts = counts
        try:
            assert estimate_text(text) == estimate_token_count([{"text": text}])
        finally:
            estimator.utf16_counts = utf16_counts


@pytest.mark.parametrize(
    "text", ["é" * 100_000, "é" * 100_001, "a😀" * 33_334, "a😀" * 33_333, "\ud800" * 100_001]
)
def test_estimate_text_takes_the_long_text_shortcut_as_the_estimator(text: str) -> None:
    assert estimate_text(text) == estimate_token_count([{"text": text}])


def test_message_estimates_follow_convert_session_to_client_history() -> None:
    """Per message, the parts the reader estimates are the ones the history Gemini CLI rebuilds holds."""
    from ctxtool.compress.gemini_cli.chat_compression import convert_session_to_client_history, strip_thoughts
    from ctxtool.session.discover import discover
    from ctxtool.session.read import read_session

    checked = 0
    for sp in discover([FIXTURES]).files:
        if not sp.path.name.endswith(".json"):
            continue
        messages = [dict(m) for m in read_session(sp.path).messages]
        history = strip_thoughts(convert_session_to_client_history(messages))
        text_turns = [
            t
            for t in history
            if all(isinstance(p, dict) and set(p) == {"text"} for p in t["content"]["parts"])
        ]
        expected = sum(estimate_token_count(t["content"]["parts"]) for t in text_turns)
        rows = load([sp.path]).messages
        ids = {t["id"] for t in text_turns}
        got = rows.filter(pl.col("message_id").is_in(list(ids))).select(
            pl.col("est_prompts") + pl.col("est_model")
        )
        assert abs(int(got.to_series().sum()) - expected) <= len(text_turns), sp.path
        checked += len(text_turns)
    assert checked > 5
