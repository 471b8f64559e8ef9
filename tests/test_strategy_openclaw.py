"""OpenClaw's safeguard on Pi's cut: fallback, preserved turns, tool failures, cap, chunking."""

from __future__ import annotations

from ctxtool.compress.strategies import base as s
from ctxtool.compress.strategies import openclaw, pi
from ctxtool.compress.summarize.offline import OfflineSummarizer
from tests.test_strategy_pi import NOW, call, gemini, ids, opts, roundtrip, user


def test_trigger_uses_the_reserve_floor() -> None:
    msgs = [user(1, "a"), gemini(1, "b", total=80_001)]
    trig = openclaw.OpenClawStrategy().trigger(msgs, opts(context_window=100_000))
    assert trig.limit == 80_000
    assert trig.would_trigger


def test_structured_fallback_when_nothing_real_to_summarise() -> None:
    msgs = [user(1, "hi"), gemini(1, "hello")]
    result = openclaw.OpenClawStrategy().plan(
        msgs, OfflineSummarizer(), opts(force=True), now=NOW, new_id=ids()
    )
    assert result.calls == []
    assert result.summary is not None
    assert result.summary.startswith("## Decisions\nNo prior history.")
    assert result.messages is not None
    assert roundtrip(result.messages)[2:] == msgs


def test_safeguard_sections_preserved_turns_and_failures() -> None:
    msgs = [
        user(1, "build it"),
        gemini(
            1,
            "",
            [call("c1", "run_shell_command", {"command": "make"}, "make: *** [all] Error 2", status="error")],
        ),
        user(2, "try again"),
        gemini(2, "retrying"),
        user(3, "ok"),
        gemini(3, "", [call("c2", "read_file", {"file_path": "/p/big.txt"}, "z" * 100_000)]),
        gemini(4, "done", total=10),
    ]
    result = openclaw.OpenClawStrategy().plan(
        msgs, OfflineSummarizer(), opts(force=True), now=NOW, new_id=ids()
    )
    assert result.summary is not None
    text = result.summary
    assert "## Recent turns preserved verbatim\n- User: build it" in text
    assert "## Tool Failures\n- run_shell_command: make: *** [all] Error 2" in text
    assert len(text) <= openclaw.MAX_COMPACTION_SUMMARY_CHARS
    out = roundtrip(result.messages or [])
    assert out[0]["content"][0]["text"].startswith(pi.COMPACTION_SUMMARY_PREFIX)


def test_cap_keeps_the_suffix() -> None:
    capped = openclaw.cap_preserving_suffix("b" * 20_000, "\n\nSUFFIX")
    assert len(capped) == openclaw.MAX_COMPACTION_SUMMARY_CHARS
    assert capped.endswith(openclaw.TRUNCATION_MARKER + "\n\nSUFFIX")
    assert openclaw.cap_preserving_suffix("b", "s" * 17_000) == "s" * 16_000


def test_adaptive_chunk_ratio_and_chunking() -> None:
    assert openclaw.compute_adaptive_chunk_ratio([], 1000) == 0.4
    # avg 100 x 1.2 / 1000 = 0.12 > 0.1: reduced by min(0.24, 0.25)
    assert abs(openclaw.compute_adaptive_chunk_ratio([100] * 3, 1000) - 0.16) < 1e-9
    assert abs(openclaw.compute_adaptive_chunk_ratio([50], 1000) - 0.4) < 1e-9
    assert abs(openclaw.compute_adaptive_chunk_ratio([500], 1000) - 0.15) < 1e-9
    tokens = {0: 5, 1: 5, 2: 50, 3: 5}
    assert openclaw.chunk_by_max_tokens([0, 1, 2, 3], tokens, 12) == [[0, 1], [2], [3]]
    assert openclaw.split_by_token_share([0, 1, 2, 3], {0: 1, 1: 1, 2: 1, 3: 1}) == [[0, 1], [2, 3]]


def test_long_history_is_summarised_in_stages() -> None:
    msgs = []
    for i in range(1, 17):
        msgs += [user(i, f"step {i} " + "w" * 12_000), gemini(i, f"did step {i}")]
    msgs.append(gemini(99, "end", total=10))
    # ~48,000 tokens, 20,000 kept; a 12,000 window prunes the history share and makes chunks tiny.
    result = openclaw.OpenClawStrategy().plan(
        msgs, OfflineSummarizer(), opts(force=True, context_window=12_000), now=NOW, new_id=ids()
    )
    assert result.status == "COMPRESSED"
    assert len(result.calls) > 2
    assert any("history-share pruning" in n for n in result.notes)
    # The pruned oldest part is summarised first, on its own.
    assert "[User]: step 1 " in result.calls[0].contents[0]["parts"][0]["text"]
    assert s.record_units(0, (result.messages or [])[0])[0].text.startswith(pi.COMPACTION_SUMMARY_PREFIX)
