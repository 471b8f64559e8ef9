"""Invariants of the Gemini CLI compression port (spec gemini-cli-compression.md sections 4-7)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxtool.common.jsvalue import json_length
from ctxtool.compress.gemini_cli import chat_compression as g
from ctxtool.compress.gemini_cli.chat_compression import CompressionStatus
from ctxtool.compress.summarizer import ModelCall

texts = st.text(alphabet=st.sampled_from('ab 中😀\n"\\'), max_size=60)
text_part = st.builds(lambda t: {"text": t}, texts)
call_part = st.builds(
    lambda n: {"functionCall": {"name": n, "args": {"x": 1.0}}}, st.sampled_from(["ls", "cat"])
)
response_part = st.builds(
    lambda n, t: {"functionResponse": {"name": n, "response": {"output": t}}},
    st.sampled_from(["ls", "cat"]),
    texts,
)
user_turn = st.builds(
    lambda parts: {"role": "user", "parts": parts},
    st.lists(text_part | response_part, min_size=1, max_size=3),
)
model_turn = st.builds(
    lambda parts: {"role": "model", "parts": parts}, st.lists(text_part | call_part, min_size=1, max_size=3)
)
histories = st.lists(user_turn | model_turn, max_size=12)
fractions = st.floats(min_value=0.01, max_value=0.99)


class EchoSummarizer:
    name = "echo"
    deterministic = True

    def __init__(self, length: int) -> None:
        self.length = length

    def generate(self, call: ModelCall) -> str | None:
        return "s" * self.length if call.kind == "summary" else None


@settings(max_examples=200, deadline=None)
@given(histories, fractions)
def test_split_lands_on_a_plain_user_turn(history: list[dict[str, Any]], fraction: float) -> None:
    i = g.find_compress_split_point(history, fraction)
    assert 0 <= i <= len(history)
    if 0 < i < len(history):
        turn = history[i]
        assert turn["role"] == "user"
        assert not any("functionResponse" in p for p in turn["parts"])
    if i == len(history) and history:
        assert history[-1]["role"] == "model"
        assert not any("functionCall" in p for p in history[-1]["parts"])


@settings(max_examples=200, deadline=None)
@given(histories, fractions)
def test_kept_share_follows_section_5(history: list[dict[str, Any]], fraction: float) -> None:
    counts = [json_length(c) for c in history]
    total = sum(counts)
    i = g.find_compress_split_point(history, fraction)
    plain = [j for j, c in enumerate(history) if g._is_plain_user_turn(c)]
    reached = [j for j in plain if sum(counts[:j]) >= total * fraction]
    if reached:
        # the first plain user turn whose preceding share reaches the fraction: keeps at most 1 - fraction
        assert i == reached[0]
        assert sum(counts[i:]) <= total * (1 - fraction) + 1e-9 * total
    elif i < len(history):
        # no split after the target: the last plain user turn before it (or 0), keeping more
        assert i == (plain[-1] if plain else 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(text_part | call_part | response_part, max_size=8), st.sampled_from([1, 3, 4]))
def test_estimates_are_never_negative(parts: list[dict[str, Any]], cpt: int) -> None:
    n = g.estimate_token_count(parts, cpt)
    assert n >= 0
    assert g.estimate_token_count([*parts, {"text": "abcd"}], cpt) >= n


@settings(max_examples=100, deadline=None)
@given(histories, st.integers(0, 3000), st.integers(0, 400))
def test_compressed_never_increases_the_token_count(
    history: list[dict[str, Any]], original: int, summary_len: int
) -> None:
    env = {"role": "user", "parts": [{"text": "env"}]}
    curated = [env, *history]
    r = g.compress(
        curated,
        original_token_count=original,
        model="gemini-2.5-pro",
        summarizer=EchoSummarizer(summary_len),
        force=True,
        env_turn=env,
    )
    if r.status is CompressionStatus.COMPRESSED:
        assert r.new_token_count <= r.original_token_count
        assert r.new_history is not None
        assert r.split_index is not None
        # the kept tail is byte-identical to the curated tail (nothing here exceeds the budget)
        assert r.new_history[2:] == curated[r.split_index :]
        assert r.new_history[1] == {"role": "model", "parts": [{"text": g.SUMMARY_ACK_TEXT}]}
    elif r.status is CompressionStatus.COMPRESSION_FAILED_INFLATED_TOKEN_COUNT:
        assert r.new_token_count > r.original_token_count
        assert r.new_history is None
    elif r.status is CompressionStatus.COMPRESSION_FAILED_EMPTY_SUMMARY:
        assert summary_len == 0
    else:
        assert r.status is CompressionStatus.NOOP
        assert r.split_index == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 30_000), min_size=1, max_size=6), st.integers(1, 60_000))
def test_budget_truncation_takes_every_response_older_than_the_overflow(
    sizes: list[int], budget: int
) -> None:
    history = [
        {"role": "user", "parts": [{"functionResponse": {"name": "t", "response": {"output": "a" * n}}}]}
        for n in sizes
    ]
    out = g.truncate_history_to_budget(history, tool_output_dir="d", budget=budget)
    # Outputs fit in 40,000 chars, so each placeholder is the text itself and the counter only grows:
    # the newest response whose running total overflows, and every older one, are saved.
    tokens = [n // 4 for n in sizes]
    overflow = [k for k in range(len(sizes)) if sum(tokens[k:]) > budget]
    expected = list(reversed(range(overflow[-1] + 1))) if overflow else []
    assert [s.text for s in out.saved] == ["a" * sizes[k] for k in expected]
    assert [s.truncation_id for s in out.saved] == list(range(1, len(expected) + 1))
    assert out.history == history  # same bytes: {output: s} rebuilt around an unchanged s
