"""ctxtool.measure.pricing against genai_prices.calc_price, the source of truth, on random and edge-case
counts."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import NamedTuple

import genai_prices
import polars as pl
import pytest
from genai_prices import Usage, calc_price
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxtool.measure.pricing import price_table, pricing_source, request_cost
from tests.oracle.pricing import add_costs

REAL_SESSIONS = Path(__file__).resolve().parents[2] / "shared" / "real-sessions"

# Every model name recorded in ../shared/real-sessions (test_model_list_covers_real_sessions checks this).
KNOWN_MODELS = [
    "gemini-2.5-pro",
    "gemini-2.5-flash",
    "gemini-2.5-flash-lite",
    "gemini-3-flash-preview",
    "gemini-3.1-pro-preview",
    "gemini-3.1-pro-preview-customtools",
]
UNKNOWN_MODELS = ["auto-gemini-3"]
TIERED_MODELS = ["gemini-2.5-pro", "gemini-3.1-pro-preview", "gemini-3.1-pro-preview-customtools"]
TIER_START = 200_000

# A fixed request time so the library's dated prices cannot change under the test.
AT = datetime(2026, 6, 1, 12, tzinfo=UTC)


class Req(NamedTuple):
    """One request record's model and token counts, as the frames carry them."""

    model: str | None
    input: int | None
    cached: int | None
    output: int | None
    thoughts: int | None = 0
    tool: int | None = 0


def reference_cost(model: str, inp: int, cached: int, out: int, thoughts: int = 0, tool: int = 0) -> Decimal:
    usage = Usage(input_tokens=inp + tool, cache_read_tokens=cached, output_tokens=out + thoughts)
    return calc_price(usage, model, provider_id="google", genai_request_timestamp=AT).total_price


def reference(r: Req) -> Decimal:
    assert r.model is not None
    assert r.input is not None
    assert r.cached is not None
    assert r.output is not None
    assert r.thoughts is not None
    assert r.tool is not None
    return reference_cost(r.model, r.input, r.cached, r.output, r.thoughts, r.tool)


def frame(rows: list[Req]) -> pl.DataFrame:
    schema = {
        "model": pl.String,
        "input": pl.Int64,
        "cached": pl.Int64,
        "output": pl.Int64,
        "thoughts": pl.Int64,
        "tool": pl.Int64,
    }
    return pl.DataFrame([r._asdict() for r in rows], schema=schema)


def costs(rows: list[Req]) -> tuple[list[float | None], list[str]]:
    df, warnings = add_costs(frame(rows), at=AT)
    assert df.schema["cost"] == pl.Float64
    return df.get_column("cost").to_list(), warnings


def close(actual: float | None, expected: Decimal) -> bool:
    assert actual is not None
    return abs(Decimal(repr(actual)) - expected) <= expected * Decimal("1e-12") + Decimal("1e-15")


# Prompt sizes cluster around the 200k cliff so both sides (and the exact edge) are hit often.
prompt_sizes = st.one_of(
    st.integers(0, 2_000_000),
    st.integers(TIER_START - 50, TIER_START + 50),
    st.sampled_from([TIER_START, TIER_START + 1]),
    st.integers(0, 1_000),
)


@st.composite
def requests(draw: st.DrawFn) -> Req:
    model = draw(st.sampled_from(KNOWN_MODELS))
    prompt = draw(prompt_sizes)
    tool = draw(st.integers(0, min(prompt, 5_000)))
    inp = prompt - tool
    cached = draw(st.one_of(st.just(0), st.just(prompt), st.integers(0, prompt)))
    return Req(model, inp, cached, draw(st.integers(0, 70_000)), draw(st.integers(0, 40_000)), tool)


@settings(max_examples=60, deadline=None)
@given(st.lists(requests(), min_size=1, max_size=25))
def test_add_costs_matches_calc_price(rows: list[Req]) -> None:
    got, warnings = costs(rows)
    assert warnings == []
    for r, cost in zip(rows, got, strict=True):
        assert close(cost, reference(r)), (r, cost, reference(r))


@settings(max_examples=30, deadline=None)
@given(requests())
def test_request_cost_matches_calc_price(r: Req) -> None:
    assert close(request_cost(*r, at=AT), reference(r))


@pytest.mark.parametrize("model", TIERED_MODELS)
def test_tier_cliff_is_strictly_above_200k_of_input_plus_tool(model: str) -> None:
    rows = [
        Req(model, TIER_START, 0, 1000),  # exactly 200k: still the base tier
        Req(model, TIER_START + 1, 0, 1000),  # one more: the whole request pays the tier rates
        Req(model, TIER_START - 10, 0, 1000, tool=11),  # tool tokens are prompt-side and count for the tier
        Req(model, TIER_START + 1, TIER_START + 1, 0),  # cached-only above the tier
    ]
    got, _ = costs(rows)
    for r, cost in zip(rows, got, strict=True):
        assert close(cost, reference(r))
    base, above, via_tool, _ = got
    assert base is not None
    assert above is not None
    # The cliff: one extra prompt token makes the whole request dearer per token.
    assert above / (TIER_START + 1) > base / TIER_START * 1.2
    assert via_tool == pytest.approx(above)


@pytest.mark.parametrize("model", KNOWN_MODELS)
def test_cached_tokens_are_counted_once_at_the_cache_rate(model: str) -> None:
    got, _ = costs([Req(model, 10_000, 10_000, 0), Req(model, 10_000, 0, 0), Req(model, 10_000, 4_000, 0)])
    cached_only, uncached, mixed = got
    assert close(cached_only, reference_cost(model, 10_000, 10_000, 0, 0, 0))
    assert close(mixed, reference_cost(model, 10_000, 4_000, 0, 0, 0))
    assert cached_only is not None
    assert uncached is not None
    assert 0 < cached_only < uncached
    # input includes cached: 4k cached tokens move from the input rate to the cache rate, they are not added.
    assert mixed == pytest.approx(uncached * 0.6 + cached_only * 0.4)


@pytest.mark.parametrize("model", KNOWN_MODELS)
def test_thoughts_pay_the_output_rate_and_tool_the_input_rate(model: str) -> None:
    got, _ = costs([Req(model, 1_000, 0, 500, 0), Req(model, 1_000, 0, 0, 500), Req(model, 1_500, 0, 0, 0),
                    Req(model, 1_000, 0, 0, 0, 500)])  # fmt: skip
    as_output, as_thoughts, as_input, as_tool = got
    assert as_output == pytest.approx(as_thoughts)
    assert as_input == pytest.approx(as_tool)
    assert as_thoughts != pytest.approx(as_tool)


def test_zero_tokens_cost_zero_not_null() -> None:
    got, warnings = costs([Req(m, 0, 0, 0, 0, 0) for m in KNOWN_MODELS])
    assert got == [0.0] * len(KNOWN_MODELS)
    assert warnings == []


def test_null_tokens() -> None:
    model = "gemini-2.5-pro"
    got, warnings = costs(
        [
            Req(model, None, None, None, None, None),  # no token record at all
            Req(model, 1_000, 0, None),  # no output count
            Req(model, None, 0, 10),  # no input count
            Req(model, 1_000, None, 10, None, None),  # optional counts missing: taken as 0
        ]
    )
    assert got[:3] == [None, None, None]
    assert close(got[3], reference_cost(model, 1_000, 0, 10, 0, 0))
    assert warnings == []
    assert request_cost(model, None, 0, 10, at=AT) is None
    assert request_cost(model, 1_000, None, 10, None, None, at=AT) == pytest.approx(got[3])


@pytest.mark.parametrize("model", UNKNOWN_MODELS)
def test_unknown_model_gives_null_and_one_warning(model: str) -> None:
    rows = [Req(model, 1_000, 0, 10), Req(model, 5, 0, 1), Req("gemini-2.5-flash", 1_000, 0, 10)]
    got, warnings = costs(rows)
    assert got[:2] == [None, None]
    assert close(got[2], reference(rows[2]))
    assert len(warnings) == 1
    assert repr(model) in warnings[0]
    assert "left empty" in warnings[0]
    assert request_cost(model, 1_000, 0, 10, at=AT) is None
    with pytest.raises(LookupError):
        calc_price(Usage(input_tokens=1), model, provider_id="google")


def test_missing_model_name_is_warned() -> None:
    got, warnings = costs([Req(None, 1_000, 0, 10), Req(None, 1, 0, 1)])
    assert got == [None, None]
    assert len(warnings) == 1
    assert warnings[0].startswith("2 requests have no model name")


def test_impossible_counts_are_null_and_warned_like_the_library_refuses_them() -> None:
    model = "gemini-3-flash-preview"
    got, warnings = costs([Req(model, 100, 200, 10), Req(model, 100, 150, 10, tool=50), Req(model, -1, 0, 0)])
    assert got[0] is None
    assert close(got[1], reference_cost(model, 100, 150, 10, 0, 50))  # cached may reach input + tool
    assert got[2] is None
    assert len(warnings) == 1
    assert warnings[0].startswith(f"2 requests of model {model!r} have impossible token counts")
    with pytest.raises(ValueError, match="cannot exceed"):
        reference_cost(model, 100, 200, 10, 0, 0)
    assert request_cost(model, 100, 200, 10, at=AT) is None


def test_empty_frame_and_unsorted_input_keep_row_order() -> None:
    df, warnings = add_costs(frame([]), at=AT)
    assert df.height == 0
    assert df.schema["cost"] == pl.Float64
    assert warnings == []
    rows = [Req(KNOWN_MODELS[i % len(KNOWN_MODELS)], 1_000 * (i + 1), 0, i) for i in range(12)]
    got, _ = costs(rows)
    for r, cost in zip(rows, got, strict=True):
        assert close(cost, reference(r))


def test_reused_table_resolves_models_it_lacks() -> None:
    table = price_table(["gemini-2.5-pro"], at=AT)
    rows = [Req("gemini-2.5-flash", 1_000, 0, 10), Req("auto-gemini-3", 1, 0, 1)]
    df, warnings = add_costs(frame(rows), table)
    cost = df.get_column("cost").to_list()
    assert close(cost[0], reference(rows[0]))
    assert cost[1] is None
    assert len(warnings) == 1


def test_table_resolves_aliases_through_the_library() -> None:
    table = price_table(["gemini-3.1-pro-preview-customtools", "auto-gemini-3"], at=AT)
    assert table.rates["gemini-3.1-pro-preview-customtools"].model_id == "gemini-3.1-pro-preview"
    assert table.unknown == ("auto-gemini-3",)


def test_pricing_source_names_the_library_version() -> None:
    source = pricing_source()
    assert source.startswith(f"genai-prices {genai_prices.__version__} ")
    assert "price data" in source


@pytest.mark.skipif(not REAL_SESSIONS.is_dir(), reason="../shared/real-sessions is absent")
def test_model_list_covers_real_sessions() -> None:
    found: set[str] = set()
    for path in REAL_SESSIONS.glob("*.json*"):
        found.update(re.findall(r'"model":\s*"([^"]*gemini[^"]*)"', path.read_text(encoding="utf-8")))
    assert found == set(KNOWN_MODELS) | set(UNKNOWN_MODELS)
    table = price_table(found, at=AT)
    assert set(table.rates) == set(KNOWN_MODELS)
    assert set(table.unknown) == set(UNKNOWN_MODELS)
