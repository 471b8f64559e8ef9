"""Costs on a frame of requests, in polars (``add_costs``): the oracle's; the package prices each request
once, in plain Python (``ctxtool.measure.pricing.request_costs``)."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from ctxtool.measure.pricing import (
    TOKEN_COLUMNS,
    PriceTable,
    impossible_warning,
    nameless_warning,
    price_table,
)


def add_costs(
    df: pl.DataFrame, table: PriceTable | None = None, *, at: datetime | None = None, memo: bool = True
) -> tuple[pl.DataFrame, list[str]]:
    """Add a Float64 ``cost`` column (USD) to a frame of requests; return it with warning messages.

    ``df`` has a ``model`` column (str) and integer columns ``input``, ``cached``, ``output``, ``thoughts``,
    ``tool``. ``cost`` is null for an unknown or missing model, when ``input`` or ``output`` is null (no
    token record), and for impossible counts (negative, or ``cached`` above ``input + tool``), which the
    library refuses too. Null ``cached``, ``thoughts`` and ``tool`` count as 0. One warning per unknown model,
    plus one per model with impossible counts. Pass ``table`` to reuse a resolved :class:`PriceTable`.
    """
    import polars as pl  # here, not at the top: a worker process resolves rates without loading polars

    missing = [c for c in ("model", *TOKEN_COLUMNS) if c not in df.columns]
    if missing:
        raise ValueError(f"add_costs needs columns {', '.join(missing)}")
    present: list[str | None] = df.get_column("model").cast(pl.String).unique().sort().to_list()
    names = [m for m in present if m is not None]
    if table is None:
        table = price_table(names, at, memo=memo)
    else:
        uncovered = [m for m in names if not table.covers(m)]
        if uncovered:
            table = table.merged(price_table(uncovered, table.at, memo=memo))
    warnings = [table.unknown_model_warning(m) for m in names if m in table.unknown]
    if None in present:
        nameless = df.get_column("model").null_count()
        warnings.append(nameless_warning(nameless))

    prompt = pl.col("input").cast(pl.Int64) + pl.col("tool").cast(pl.Int64).fill_null(0)
    cache = pl.col("cached").cast(pl.Int64).fill_null(0)
    out = pl.col("output").cast(pl.Int64) + pl.col("thoughts").cast(pl.Int64).fill_null(0)
    invalid = (
        (pl.col("input") < 0)
        | (pl.col("output") < 0)
        | (cache < 0)
        | (pl.col("thoughts").fill_null(0) < 0)
        | (pl.col("tool").fill_null(0) < 0)
        | (cache > prompt)
    )

    cost: pl.Expr = pl.lit(None, dtype=pl.Float64)
    # Build the chain so that, per model, the highest tier whose threshold the prompt exceeds is tried first.
    branches: list[tuple[pl.Expr, pl.Expr]] = []
    for name, rates in table.rates.items():
        for tier in reversed(rates.tiers):
            cond = (pl.col("model") == name) & (prompt > tier.above)
            value = (
                pl.lit(tier.per_request)
                + (prompt - cache).cast(pl.Float64) * tier.input
                + cache.cast(pl.Float64) * tier.cached
                + out.cast(pl.Float64) * tier.output
            )
            branches.append((cond, value))
    if branches:
        # Each when/then is null where its condition is false; the first true branch wins.
        cost = pl.coalesce([pl.when(cond).then(value) for cond, value in branches])
    cost = pl.when(invalid.fill_null(False)).then(pl.lit(None, dtype=pl.Float64)).otherwise(cost)

    result = df.with_columns(cost.cast(pl.Float64).alias("cost"))

    bad = (
        df.lazy()
        .filter(invalid.fill_null(False) & pl.col("model").is_in(list(table.rates)))
        .group_by("model")
        .len()
        .sort("model")
        .collect()
    )
    warnings.extend(impossible_warning(name, count) for name, count in bad.iter_rows())
    return result, warnings
