"""The turn grain: one typed prompt and every request it caused."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    pass


from ctxtool.frames.model import COMPOSITION_COLUMNS, TOKEN_COLUMNS
from tests.oracle.exprs import cache_ratio_expr, cost_aggs, known_cost


def turns_frame(messages: pl.DataFrame, requests: pl.DataFrame, meta: pl.DataFrame) -> pl.DataFrame:
    per_msg = messages.group_by("session_key", "turn", maintain_order=True).agg(
        # The typed prompt; in the live view, where a compression may have left only Gemini CLI's copy of
        # it (a message that is not a prompt but keeps its preview), that copy's text.
        pl.coalesce(
            pl.col("preview").filter(pl.col("is_prompt")).first(), pl.col("preview").drop_nulls().first()
        ).alias("prompt"),
        pl.col("ts").min().alias("start"),
        pl.col("ts").max().alias("end"),
        pl.col("live").filter(pl.col("is_prompt") | pl.col("preview").is_not_null()).max().alias("live"),
        pl.len().alias("messages"),
        pl.col("tool_calls").sum(),
        pl.col("tool_errors").sum(),
        pl.col("compression").any().alias("compressed"),
    )
    per_req = requests.group_by("session_key", "turn").agg(
        pl.len().alias("requests"),
        *[pl.col(k).sum() for k in TOKEN_COLUMNS],
        pl.col("input").max().alias("peak_context"),
        pl.col("context_limit").max(),
        *cost_aggs(),
        pl.col("model").drop_nulls().unique().sort().str.join(",").alias("models"),
        *[pl.col(c).sum() for c in COMPOSITION_COLUMNS],
    )
    turns = per_msg.join(per_req, on=["session_key", "turn"], how="left", maintain_order="left").with_columns(
        pl.col("requests").fill_null(0),
        *[pl.col(k).fill_null(0) for k in (*TOKEN_COLUMNS, *COMPOSITION_COLUMNS)],
        pl.col("live").fill_null(True),
        duration_s=(pl.col("end") - pl.col("start")).dt.total_milliseconds() / 1000.0,
    )
    turns = turns.with_columns(
        # A turn without requests cost nothing; one with requests of unknown price costs what is known.
        *known_cost(),
        context_share=pl.col("peak_context") / pl.col("context_limit"),
        cache_ratio=cache_ratio_expr(),
    ).drop("_priced")
    # Messages before the first prompt (a <session_context> block, a resumed history) form turn 0; keep it
    # only when it holds something.
    turns = turns.join(
        meta.select("session_key", "session", "project"), on="session_key", how="left", maintain_order="left"
    )
    return turns.filter((pl.col("turn") > 0) | (pl.col("requests") > 0) | pl.col("compressed"))


def turn_count() -> pl.Expr:
    """A session's turns, over its message rows: the rows ``turns_frame`` keeps for it, without building them.

    Each prompt starts a turn; turn 0 (messages before the first prompt) is one when it holds a request or a
    compression, as a request first seen in a ``$set.messages`` checkpoint of a file that has no prompt
    before it does. So every request is in a turn that is counted, and ``stats --by session`` counts the
    rows ``--by turn`` lists."""
    request = (pl.col("type") == "gemini") & pl.col("input").is_not_null()
    return pl.col("turn").filter((pl.col("turn") > 0) | request | pl.col("compression")).n_unique()


def with_turn_counts(sessions: pl.DataFrame, turns: pl.DataFrame) -> pl.DataFrame:
    """``sessions`` with ``turns`` counted from the rows of a turns frame (a filtered or live view's)."""
    counts = turns.group_by("session_key").agg(pl.len().cast(sessions.schema["turns"]).alias("_turns"))
    return (
        sessions.join(counts, on="session_key", how="left", maintain_order="left")
        .with_columns(turns=pl.col("_turns").fill_null(0))
        .drop("_turns")
    )
