"""The session grain: one row per session (subagents attributed), and the compression calls Gemini
CLI bills but never records."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from ctxtool.measure.pricing import PriceTable


from ctxtool.frames.model import (
    COMPOSITION_COLUMNS,
    TOKEN_COLUMNS,
)
from ctxtool.measure.tokens import DEFAULT_TOKEN_LIMIT
from tests.oracle.exprs import cache_ratio_expr, cost_aggs, known_cost, parse_times
from tests.oracle.turns import turn_count

# Gemini CLI 0.61.0 makes two model calls per compression it runs (ChatCompressionService `compress`: the
# summary, then the verification probe, both role `utility_compressor`) and records neither in the session.
HIDDEN_CALLS_PER_COMPRESSION = 2


def _hidden_compression_calls(
    messages: pl.DataFrame,
    prices: PriceTable | None = None,
    written_by_ctxtool: pl.DataFrame | None = None,
    compacted_in_place: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per session, an estimate of the compression calls the file shows happened but does not record.

    For each ``<state_snapshot>`` message: both calls read the history as it stood (the prompt of the last
    request recorded before it, an upper bound: Gemini CLI keeps its last 30 % out of the summary), the probe
    also the summary; each writes about the summary (4 characters a token). Priced at the rates of the model
    of that last request. An estimate, labelled so, never added to billed figures.

    Not for the snapshots of a session ctxtool wrote (``written_by_ctxtool``: the keys of sessions marked
    ``derivedFrom``) before its first recorded request: those are ctxtool's own summary (no Gemini CLI call)
    and copies of the original's messages (whose calls the original counts). Nor for the snapshot ctxtool
    wrote into a session it compacted in place (``compacted_in_place``: session key and ``compacted_at``, the
    time of its latest ``compact --in-place``, which is the snapshot's timestamp).
    """
    from tests.oracle.pricing import add_costs

    marked = messages.select(
        "session_key",
        "is_snapshot",
        "timestamp",
        "text_chars",
        last_input=pl.col("input").forward_fill().over("session_key").fill_null(0),
        model=pl.when(pl.col("input").is_not_null()).then(pl.col("model")).forward_fill().over("session_key"),
        requested=pl.col("input").is_not_null().cum_sum().over("session_key") > 0,
    ).filter(pl.col("is_snapshot"))
    if written_by_ctxtool is not None and written_by_ctxtool.height:
        copied = pl.col("session_key").is_in(written_by_ctxtool.get_column("session_key").implode())
        marked = marked.filter(~copied | pl.col("requested"))
    if compacted_in_place is not None and compacted_in_place.height:
        marked = marked.join(
            compacted_in_place,
            left_on=["session_key", "timestamp"],
            right_on=["session_key", "compacted_at"],
            how="anti",
        )
    summary = pl.col("text_chars") // 4
    calls = marked.with_columns(
        input=HIDDEN_CALLS_PER_COMPRESSION * pl.col("last_input") + summary,
        output=HIDDEN_CALLS_PER_COMPRESSION * summary,
        cached=pl.lit(0, dtype=pl.Int64),
        thoughts=pl.lit(0, dtype=pl.Int64),
        tool=pl.lit(0, dtype=pl.Int64),
    )
    calls, _ = add_costs(calls, prices)
    return calls.group_by("session_key").agg(
        (pl.len() * HIDDEN_CALLS_PER_COMPRESSION).alias("hidden_requests"),
        pl.col("input").sum().alias("hidden_input"),
        pl.col("output").sum().alias("hidden_output"),
        pl.col("cost").sum().alias("hidden_cost"),
    )


def request_aggs() -> list[pl.Expr]:
    """What a session's row sums and takes of its requests (grouped by ``session_key``): every such column of
    a session row comes from here, for the whole history and for what a filter keeps alike."""
    return [
        pl.len().alias("requests"),
        *[pl.col(k).sum() for k in TOKEN_COLUMNS],
        *cost_aggs(),
        pl.col("input").filter(pl.col("live")).last().alias("context"),
        pl.col("input").filter(pl.col("live")).max().alias("peak_context"),
        pl.col("context_limit").max(),
        pl.col("model").drop_nulls().unique().sort().str.join(",").alias("models"),
        pl.col("live").sum().alias("live_requests"),
        *[pl.col(c).sum() for c in COMPOSITION_COLUMNS],
    ]


# The columns ``request_aggs`` makes (``_priced`` is ``cost_aggs``' helper, dropped once the cost is known).
REQUEST_COLUMNS = (
    "requests",
    *TOKEN_COLUMNS,
    "cost",
    "unpriced",
    "_priced",
    "context",
    "peak_context",
    "context_limit",
    "models",
    "live_requests",
    *COMPOSITION_COLUMNS,
)


def request_fills() -> list[pl.Expr]:
    """``request_aggs``' columns of a session left without requests (after a left join): zero sums, the
    default limit; ``context``, ``peak_context`` and ``models`` stay null."""
    return [
        pl.col("requests").fill_null(0),
        pl.col("live_requests").fill_null(0),
        *[pl.col(k).fill_null(0) for k in (*TOKEN_COLUMNS, *COMPOSITION_COLUMNS)],
        pl.col("context_limit").fill_null(DEFAULT_TOKEN_LIMIT),
    ]


def derived_from_sums() -> dict[str, pl.Expr]:
    """A row's ratios, from its own sums and peak: the one statement of them for session rows, before and
    after a filter or a roll-up, so that none can keep a ratio of requests it no longer counts."""
    return {
        "context_share": pl.col("peak_context") / pl.col("context_limit"),
        "cache_ratio": cache_ratio_expr(),
    }


def sessions_frame(
    meta: pl.DataFrame, messages: pl.DataFrame, requests: pl.DataFrame, prices: PriceTable | None = None
) -> pl.DataFrame:
    hidden = _hidden_compression_calls(
        messages,
        prices,
        meta.filter(pl.col("derived_from").is_not_null()).select("session_key"),
        meta.filter(pl.col("compacted_at").is_not_null()).select("session_key", "compacted_at"),
    )
    msg = messages.group_by("session_key").agg(
        pl.len().alias("billed_messages"),
        turn_count().alias("turns"),
        pl.col("tool_calls").sum(),
        pl.col("tool_errors").sum(),
        pl.col("compression_info").sum().alias("compression_infos"),
        pl.col("is_snapshot").sum().alias("snapshots"),
        pl.col("ts").min().alias("first_ts"),
        pl.col("ts").max().alias("last_ts"),
    )
    req = requests.group_by("session_key").agg(*request_aggs())
    meta = meta.with_columns(
        start_ts=parse_times(meta.get_column("start_time")),
        updated_ts=parse_times(meta.get_column("last_updated")),
    )
    out = (
        meta.join(msg, on="session_key", how="left", maintain_order="left")
        .join(req, on="session_key", how="left", maintain_order="left")
        .join(hidden, on="session_key", how="left", maintain_order="left")
        .with_columns(
            *[pl.col(k).fill_null(0) for k in ("hidden_requests", "hidden_input", "hidden_output")],
            pl.col("hidden_cost").fill_null(0.0),
            *request_fills(),
            *[
                pl.col(k).fill_null(0)
                for k in (
                    "billed_messages",
                    "turns",
                    "tool_calls",
                    "tool_errors",
                    "compression_infos",
                    "snapshots",
                )
            ],
            # Each resume writes a metadata line with a new startTime (Gemini CLI 0.61.0,
            # chatRecordingService.ts `initialize`); the session started at the earliest of them all.
            start=pl.min_horizontal(pl.col("start_ts"), pl.col("first_ts")),
            end=pl.coalesce(pl.col("last_ts"), pl.col("updated_ts")),
        )
        .with_columns(
            *known_cost(),
            # One compression leaves an info marker (interactive UI) and, since v0.44, a snapshot message;
            # count events, not traces. `$set.messages` checkpoints also come from other history edits,
            # so they have their own column.
            compressions=pl.max_horizontal("compression_infos", "snapshots"),
            **derived_from_sums(),
        )
        .drop("_priced", "first_ts", "last_ts", "start_time", "last_updated", "start_ts", "updated_ts")
    )
    children = (
        out.filter(pl.col("parent_session_key").is_not_null())
        .group_by("parent_session_key")
        .agg(pl.len().alias("subagents"))
    )
    return out.join(
        children, left_on="session_key", right_on="parent_session_key", how="left", maintain_order="left"
    ).with_columns(pl.col("subagents").fill_null(0))
