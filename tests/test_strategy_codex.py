"""Codex's local compaction: user messages only, newest first within 20,000 tokens, summary as user."""

from __future__ import annotations

from ctxtool.compress.strategies import codex
from ctxtool.compress.summarize.offline import OfflineSummarizer
from tests.test_strategy_pi import NOW, call, gemini, ids, opts, roundtrip, user


def test_only_user_messages_newest_first_within_budget() -> None:
    msgs = [
        user(1, "old " + "a" * 80_000),  # 20,001 tokens: cannot fit beside the others
        gemini(1, "", [call("c1", "ls", {}, "x")]),
        user(2, "middle"),
        gemini(2, "reply"),
        user(3, "newest"),
        gemini(3, "reply", total=100),
    ]
    result = codex.CodexStrategy().plan(msgs, OfflineSummarizer(), opts(force=True), now=NOW, new_id=ids())
    assert result.messages is not None
    out = roundtrip(result.messages)
    texts = [m["content"][0]["text"] for m in out]
    assert [m["type"] for m in out] == ["user", "user", "user", "user", "gemini"]
    assert texts[0].startswith("old aaa")
    assert "tokens truncated…" in texts[0]
    assert texts[1:3] == ["middle", "newest"]
    assert texts[3].startswith(codex.SUMMARY_PREFIX + "\n")
    assert codex.approx_token_count(texts[0]) <= 20_000 - 2 - 2 + 10  # the remaining budget, plus the marker
    assert not any("toolCalls" in m for m in out)


def test_previous_summaries_are_not_kept_as_user_messages() -> None:
    msgs = [
        user(1, codex.SUMMARY_PREFIX + "\nold summary"),
        gemini(1, "ok"),
        user(2, "go on"),
        gemini(2, "ok"),
    ]
    assert [t for _, t in codex.user_messages(msgs)] == ["go on"]


def test_truncate_middle_and_trigger() -> None:
    assert codex.truncate_middle("abc", 5) == "abc"
    cut = codex.truncate_middle("h" * 40 + "t" * 40, 10)
    assert cut == "h" * 20 + "…10 tokens truncated…" + "t" * 20
    msgs = [user(1, "a"), gemini(1, "b", total=89_999), user(2, "c"), gemini(2, "d", total=90_000)]
    trig = codex.CodexStrategy().trigger(msgs, opts(context_window=100_000))
    assert trig.limit == 90_000
    assert trig.turn == 2
    assert trig.message_id == "g2"
