"""The memo of resolved rates: same prices as the library, rebuilt when missing or damaged.

The shipped snapshot (tests/test_rates_snapshot.py) answers before the memo is looked at, so these tests set
it aside: the memo is what a run falls back to when the snapshot cannot answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxtool.measure import pricing


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CTXTOOL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(pricing, "SNAPSHOT_PATH", tmp_path / "no-snapshot.json")
    return tmp_path


def test_rates_are_memoised_and_reused(cache_dir: Path) -> None:
    first = pricing.price_table(["gemini-2.5-pro", "auto-gemini-3"])
    files = list((cache_dir / "prices").glob("rates-*.json"))
    assert len(files) == 1
    again = pricing._load_rate_cache()
    assert again is not None
    assert again.rates == first.rates
    assert again.unknown == ("auto-gemini-3",)
    # A new model is resolved through the library and added to the same memo.
    pricing.price_table(["gemini-2.5-flash"])
    merged = pricing._load_rate_cache()
    assert merged is not None
    assert set(merged.rates) == {"gemini-2.5-pro", "gemini-2.5-flash"}


def test_memoised_cost_equals_library_cost(cache_dir: Path) -> None:
    pricing.price_table(["gemini-2.5-pro"])
    from genai_prices import Usage, calc_price

    usage = Usage(input_tokens=250_005, cache_read_tokens=1000, output_tokens=700)
    expected = float(calc_price(usage, "gemini-2.5-pro", provider_id="google").total_price)
    cost = pricing.request_cost("gemini-2.5-pro", 250_000, cached=1000, output=500, thoughts=200, tool=5)
    assert cost == pytest.approx(expected, rel=1e-12)


def test_damaged_memo_is_ignored_and_rewritten(cache_dir: Path) -> None:
    pricing.price_table(["gemini-2.5-pro"])
    (memo,) = (cache_dir / "prices").glob("rates-*.json")
    memo.write_text("{not json")
    table = pricing.price_table(["gemini-2.5-pro"])
    assert "gemini-2.5-pro" in table.rates
    assert pricing._load_rate_cache() is not None


def test_memo_can_be_disabled(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXTOOL_NO_PRICE_CACHE", "1")
    pricing.price_table(["gemini-2.5-pro"])
    assert not (cache_dir / "prices").exists()
