"""The polars expressions the frames derived their figures with (times, context limits, cache ratios,
known costs): the oracle's, no longer the package's."""

from __future__ import annotations

import polars as pl

from ctxtool.frames.model import TS_TYPE
from ctxtool.measure.tokens import DEFAULT_TOKEN_LIMIT, MODEL_LIMITS

# Gemini CLI writes every time with JavaScript's Date.toISOString() (2026-05-25T09:30:00.123Z); a fork or a
# hand edit may write an offset or no zone (taken as UTC). Each value is read by the first format that fits,
# so a time parses the same whatever else is in its column (polars' inference guesses from the first value).
_TIME_FORMATS = (
    "%Y-%m-%dT%H:%M:%S%.fZ",
    "%Y-%m-%dT%H:%M:%S%.f%z",
    "%Y-%m-%dT%H:%M:%S%.f",
    "%Y-%m-%d %H:%M:%S%.f",
)


def parse_times(text: pl.Series) -> pl.Series:
    """UTC datetimes of ISO-8601 times (null where none of ``_TIME_FORMATS`` fits)."""
    out = text.str.to_datetime(format=_TIME_FORMATS[0], strict=False, time_zone="UTC").cast(TS_TYPE)
    for fmt in _TIME_FORMATS[1:]:
        if not (out.is_null() & text.is_not_null()).any():
            break
        other = text.str.to_datetime(format=fmt, strict=False, time_zone="UTC").cast(TS_TYPE)
        out = pl.select(pl.coalesce(out, other)).to_series()
    return out.alias(text.name)


def context_limit_expr(model: pl.Expr) -> pl.Expr:
    """``token_limit(model)`` as a vectorised expression over a model column."""
    expr = pl.lit(DEFAULT_TOKEN_LIMIT, dtype=pl.Int64)
    for name, limit in MODEL_LIMITS.items():
        expr = pl.when(model == name).then(pl.lit(limit, dtype=pl.Int64)).otherwise(expr)
    return expr


def cache_ratio_expr() -> pl.Expr:
    """``ctxtool.measure.tokens.cache_ratio`` on a frame's ``cached`` and ``input`` (the prompt count)."""
    return pl.when(pl.col("input") > 0).then(pl.col("cached") / pl.col("input"))


def cost_aggs() -> list[pl.Expr]:
    """A group's cost: what the requests of known price cost (``cost``), how many have no known price
    (``unpriced``: a model genai-prices does not know) and the helper ``_priced``; see ``known_cost``."""
    return [
        pl.col("cost").sum().alias("cost"),
        pl.col("cost").is_null().sum().cast(pl.Int64).alias("unpriced"),
        pl.col("cost").is_not_null().sum().cast(pl.Int64).alias("_priced"),
    ]


def known_cost() -> list[pl.Expr]:
    """After ``cost_aggs`` and a left join: the known part of the cost, summed (0 for no requests), null only
    when requests were made and none has a known price; ``unpriced`` marks a partial sum."""
    return [
        pl.when((pl.col("_priced").fill_null(0) == 0) & (pl.col("unpriced").fill_null(0) > 0))
        .then(None)
        .otherwise(pl.col("cost").fill_null(0.0))
        .alias("cost"),
        pl.col("unpriced").fill_null(0),
    ]
