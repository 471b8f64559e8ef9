"""What fills a session's context: the largest items at its last request (``ctxtool stats --top N``).

Owns: naming the items of a history (a tool's output by tool and target, a prompt, a model turn, the overhead
every request carries) and sizing them: each item's Gemini CLI estimate, scaled so that the history's
estimates add up to the recorded prompt of the session's last live request less its overhead. Never prints.
"""

from __future__ import annotations

import polars as pl

from ctxtool.frames.model import COMPOSITION_COLUMNS, Corpus

TOP_COLUMNS = ("session", "project", "rank", "item", "tool", "target", "count", "tokens", "share", "context")


def last_requests(corpus: Corpus) -> pl.DataFrame:
    """Per session, its last live request: ``session_key``, ``position``, ``context``, the ``ctx_*`` parts
    and ``scale`` (recorded tokens per estimated token of its history)."""
    last = (
        corpus.requests.filter(pl.col("live") & (pl.col("context") > 0))
        .sort("session_key", "position")
        .group_by("session_key", maintain_order=True)
        .last()
        .select("session_key", "session", "project", "position", "context", *COMPOSITION_COLUMNS)
    )
    hist = corpus.messages.select(
        "session_key",
        "position",
        history=pl.col("hist_prompts") + pl.col("hist_model") + pl.col("hist_tool_io"),
    )
    return last.join(hist, on=["session_key", "position"], how="left").with_columns(
        scale=pl.when(pl.col("history") > 0)
        .then((pl.col("context") - pl.col("ctx_overhead")) / pl.col("history"))
        .otherwise(0.0)
    )


def top_consumers(corpus: Corpus, n: int) -> pl.DataFrame:
    """The ``n`` largest items in context at the last live request of each session, largest first: tool
    outputs summed by tool and target (file, command), prompts (what the user typed or pasted), model turns,
    and the overhead. ``tokens`` is on the recorded scale; ``share`` is of that request's ``context``."""
    last = last_requests(corpus)
    if last.height == 0:
        types = (pl.String, pl.String, pl.Int64, pl.String, pl.String, pl.String, pl.Int64, pl.Int64)
        return pl.DataFrame(schema=dict(zip(TOP_COLUMNS, (*types, pl.Float64, pl.Int64), strict=True)))
    cut = last.select("session_key", last_position="position")
    history = corpus.messages.join(cut, on="session_key").filter(
        pl.col("live") & (pl.col("position") < pl.col("last_position"))
    )
    estimated = [_prompts(history), _model_turns(history), _tool_outputs(corpus, history)]
    items = pl.concat(estimated, how="vertical_relaxed").join(
        last.select("session_key", "scale"), on="session_key"
    )
    items = items.select(
        "session_key", "item", "tool", "target", "count", tokens=(pl.col("estimate") * pl.col("scale"))
    )
    overhead = last.select(
        "session_key",
        item=pl.lit("overhead"),
        tool=pl.lit(None, dtype=pl.String),
        target=pl.lit("system prompt, tool declarations, environment"),
        count=pl.lit(1, dtype=pl.Int64),
        tokens=pl.col("ctx_overhead").cast(pl.Float64),
    )
    ranked = (
        pl.concat([items, overhead], how="vertical_relaxed")
        .with_columns(pl.col("tokens").round().cast(pl.Int64))
        .sort(  # by all that tells the items of a session apart: a total order
            ["session_key", "tokens", "item", "target", "tool"], descending=[False, True, False, False, False]
        )
        .with_columns(rank=pl.int_range(1, pl.len() + 1).over("session_key"))
        .filter(pl.col("rank") <= n)
        .join(last.select("session_key", "session", "project", "context"), on="session_key")
    )
    return (
        ranked.with_columns(share=pl.col("tokens") / pl.col("context"))
        .sort(["session", "session_key", "rank"])
        .select(TOP_COLUMNS)
    )


# The items of a history, each with its Gemini CLI ``estimate`` (scaled to the recorded prompt by the caller).


def _prompts(history: pl.DataFrame) -> pl.DataFrame:
    """Each prompt (or the summary a compression left) in ``history``, named by its text or its turn."""
    return history.filter(pl.col("est_prompts") > 0).select(
        "session_key",
        item=pl.when(pl.col("is_snapshot")).then(pl.lit("summary")).otherwise(pl.lit("prompt")),
        tool=pl.lit(None, dtype=pl.String),
        target=pl.coalesce(pl.col("preview"), pl.format("turn {}", pl.col("turn"))),
        count=pl.lit(1, dtype=pl.Int64),
        estimate=pl.col("est_prompts").cast(pl.Float64),
    )


def _model_turns(history: pl.DataFrame) -> pl.DataFrame:
    """The model's messages in ``history``, summed per turn."""
    return (
        history.filter(pl.col("est_model") > 0)
        .group_by("session_key", "turn")
        .agg(pl.len().cast(pl.Int64).alias("count"), pl.col("est_model").sum().cast(pl.Float64))
        .select(
            "session_key",
            item=pl.lit("model"),
            tool=pl.lit(None, dtype=pl.String),
            target=pl.format("turn {}", pl.col("turn")),
            count="count",
            estimate="est_model",
        )
    )


def _tool_outputs(corpus: Corpus, history: pl.DataFrame) -> pl.DataFrame:
    """The outputs of the tool calls in ``history``, summed by tool and target."""
    in_history = history.select("session_key", "message_id")
    return (
        corpus.tool_calls.join(in_history, on=["session_key", "message_id"])
        .with_columns(
            # the estimator's functionResponse formula on the stored result (see columns._estimate)
            estimate=(pl.col("result_bytes") + pl.col("name").fill_null("").str.len_chars() + 12) / 4,
        )
        .group_by("session_key", "name", "target")
        .agg(pl.len().cast(pl.Int64).alias("count"), pl.col("estimate").sum())
        .select(
            "session_key",
            item=pl.lit("tool output"),
            tool="name",
            target="target",
            count="count",
            estimate="estimate",
        )
    )
