"""The message grain: per-file columns decoded into message and tool-call rows, in file order, and what
each message adds to the context (composition, events)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from ctxtool.session.columns import FileColumns


from ctxtool.common.wording import plural
from ctxtool.frames.model import MESSAGE_SCHEMA, TOOL_SCHEMA
from tests.oracle.exprs import parse_times


class Rows:
    """Files' message and tool-call rows, decoded from the workers' encoded columns into frames.

    Decoding costs the parent more than anything else it does with the rows, so the loader hands each batch
    of worker results to ``add`` as it arrives, while other workers still parse, instead of leaving it all to
    ``build_corpus``. ``where`` gives each file's first message row and first tool-call row in the frames
    (concatenated in order).
    """

    def __init__(self) -> None:
        self.messages: list[pl.DataFrame] = []
        self.tools: list[pl.DataFrame] = []
        self.where: dict[str, tuple[int, int]] = {}
        self.warnings: list[str] = []
        self._next = (0, 0)

    def add(self, files: Iterable[FileColumns]) -> None:
        """Decode the rows of ``files`` not decoded yet, and empty their encoded columns."""
        todo = [f for f in files if not f.error and f.path not in self.where]
        if not todo:
            return
        next_message, next_tool = self._next
        for f in todo:
            self.where[f.path] = (next_message, next_tool)
            next_message += f.n_messages
            next_tool += f.n_tools
        self._next = (next_message, next_tool)
        messages = [c for f in todo for c in f.messages_cols]
        self.messages.extend(_decode(messages, MESSAGE_SCHEMA, self.warnings, times=("timestamp", "ts")))
        self.tools.extend(_decode([c for f in todo for c in f.tools_cols], TOOL_SCHEMA, self.warnings))
        for f in todo:
            f.messages_cols = f.tools_cols = []

    def models(self) -> list[str]:
        """The model names in the rows decoded so far (what their requests are priced by)."""
        names: set[str] = set()
        for frame in self.messages:
            names.update(frame.get_column("model").drop_nulls().unique().to_list())
        return sorted(names)


# Decoded into Python lists this many bytes of encoded columns at a time (then turned into a frame).
_DECODE_BATCH_BYTES = 2 * 1024 * 1024


def _decode(
    chunks: list[bytes], schema: dict[str, Any], warnings: list[str], times: tuple[str, str] | None = None
) -> list[pl.DataFrame]:
    """Frames of the rows in ``chunks`` (see ``columns._assemble``), a few megabytes of them at a time so that
    their Python lists stay small; ``times`` = (text column, datetime column to add). Work done here is done
    while workers still parse. A value a column cannot hold is left empty, with a warning."""
    from ctxtool.session.columns import decode_columns

    names = list(schema)
    # No column holds a meaningful empty string (an empty id, model or preview means none).
    no_empty = [pl.when(pl.col(n) != "").then(pl.col(n)).alias(n) for n in names if schema[n] == pl.String]
    frames: list[pl.DataFrame] = []
    at = 0
    while at < len(chunks):
        columns: list[list[Any]] = [[] for _ in names]
        size = 0
        while at < len(chunks) and size < _DECODE_BATCH_BYTES:
            size += len(chunks[at])
            for column, values in zip(columns, decode_columns(chunks[at]), strict=True):
                column.extend(values)
            at += 1
        series = [_series(n, c, schema[n], warnings) for n, c in zip(names, columns, strict=True)]
        del columns
        frame = pl.DataFrame(series).with_columns(no_empty)
        if times is not None:
            frame = frame.with_columns(parse_times(frame.get_column(times[0])).alias(times[1]))
        frames.append(frame)
    return frames


def _series(name: str, values: list[Any], dtype: Any, warnings: list[str]) -> pl.Series:
    try:
        return pl.Series(name, values, dtype=dtype)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        # A count beyond 64 bits, say, from a damaged file: empty, and said, never a silently smaller sum.
        series = pl.Series(name, values, dtype=dtype, strict=False)
        lost = series.null_count() - sum(v is None for v in values)
        warnings.append(
            f"{plural(lost, 'value')} of column {name!r} {'does' if lost == 1 else 'do'} not fit its type "
            f"({dtype}): {'it is' if lost == 1 else 'they are'} left empty, so what "
            f"{'it counts' if lost == 1 else 'they count'} is missing from the totals (check the session "
            "files for damaged numbers)"
        )
        return series


def in_order(
    frames: list[pl.DataFrame], runs: list[tuple[str, int, int, int]], schema: dict[str, Any]
) -> pl.DataFrame:
    """One frame of the rows ``runs`` name (session key, file rank, first row, rows), in that order, with
    the session key and file rank of every row. ``schema`` names every column of ``frames``. Empties
    ``frames``: the decoded chunks are freed as soon as the rows are reordered."""
    full = {"session_key": pl.String, "_rank": pl.Int64, **schema}
    chunks = frames[:]
    frames.clear()
    if not runs:
        return pl.DataFrame(schema=full)
    df = pl.concat(chunks, rechunk=False) if len(chunks) != 1 else chunks[0]
    del chunks
    starts = [start for _, _, start, _ in runs]
    counts = [n for _, _, _, n in runs]
    expected = 0
    in_place = True
    for start, n in zip(starts, counts, strict=True):
        if start != expected:
            in_place = False
            break
        expected += n
    if not (in_place and expected == df.height):
        order = pl.DataFrame({"start": starts, "n": counts}, schema={"start": pl.Int64, "n": pl.Int64})
        df = df[order.select(pl.int_ranges("start", pl.col("start") + pl.col("n")).explode()).to_series()]
    keys = pl.DataFrame(
        {"session_key": [k for k, _, _, _ in runs], "_rank": [r for _, r, _, _ in runs], "n": counts},
        schema={"session_key": pl.String, "_rank": pl.Int64, "n": pl.Int64},
    ).select(pl.col("session_key").repeat_by("n").explode(), pl.col("_rank").repeat_by("n").explode())
    return pl.concat([keys, df], how="horizontal").select(list(full))


def merge_pairs(
    messages: pl.DataFrame, tools: pl.DataFrame, primary_rank: dict[str, int]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A legacy .json and the .jsonl written when it was resumed: the .jsonl's rows, preceded by any
    older rows only the .json has (billed, not live). Each message is counted once; row order is kept."""

    def keyed(df: pl.DataFrame) -> pl.DataFrame:
        rank_of = pl.col("session_key").replace_strict(primary_rank, return_dtype=pl.Int64)
        return df.with_columns(
            _is_primary=pl.col("_rank") == rank_of,
            _key=pl.concat_str("session_key", "message_id", separator="\x00"),
            _key_rank=pl.concat_str(
                "session_key", pl.col("_rank").cast(pl.String), "message_id", separator="\x00"
            ),
        )

    m = keyed(messages)
    primary_keys = m.filter(pl.col("_is_primary")).get_column("_key").drop_nulls()
    keep = (
        pl.col("_is_primary")
        | pl.col("_key").is_null()
        | (pl.col("_key").is_in(primary_keys.implode()).not_() & pl.col("_key").is_first_distinct())
    )
    m = m.filter(keep).with_columns(live=pl.col("live") & pl.col("_is_primary"))
    kept_older = m.filter(pl.col("_is_primary").not_()).get_column("_key_rank").drop_nulls()
    t = keyed(tools).filter(pl.col("_is_primary") | pl.col("_key_rank").is_in(kept_older.implode()))
    helpers = ["_is_primary", "_key", "_key_rank"]
    return m.drop(helpers), t.drop(helpers)


_HIST_COLUMNS = ("hist_prompts", "hist_model", "hist_tool_io")


def with_composition(requests: pl.DataFrame) -> pl.DataFrame:
    """Split each request's recorded prompt (``context``) into overhead, prompts, model turns and tool I/O.

    The history sent with a request is estimated part by part with Gemini CLI's estimator when the request
    was recorded (``hist_*``: the live messages before it; see ``ctxtool.session.columns``). What every
    request of a session sends besides its history (system prompt, tool declarations, environment, memory)
    is taken as the smallest part of any of its requests that its history estimate does not explain (the
    *overhead*; 0 when the estimate explains every request whole). The rest of each request's recorded
    prompt is shared among the three history parts in proportion to their estimates, so the four add up to
    ``context`` exactly (the parts are rounded down, the overhead takes the remainder).
    """
    history = pl.sum_horizontal(*_HIST_COLUMNS)
    gap = pl.col("input") - history
    floor = gap.filter((pl.col("input") > 0) & (gap >= 0)).min().over("session_key").fill_null(0).clip(0)
    base = pl.min_horizontal(floor, pl.col("input"))
    rest = pl.col("input") - base
    scale = pl.when(history > 0).then(rest / history).otherwise(0.0)
    parts = {
        "ctx_prompts": (pl.col("hist_prompts") * scale).floor().cast(pl.Int64),
        "ctx_model": (pl.col("hist_model") * scale).floor().cast(pl.Int64),
        "ctx_tool_io": (pl.col("hist_tool_io") * scale).floor().cast(pl.Int64),
    }
    return requests.with_columns(**parts).with_columns(
        ctx_overhead=pl.col("input") - pl.sum_horizontal(*parts)
    )


def with_events(requests: pl.DataFrame) -> pl.DataFrame:
    """``event``: what happened to the session's history since its previous request (comma-separated):
    ``compression`` (an info marker or a ``<state_snapshot>``), ``rewind`` (a ``$rewindTo`` record),
    ``rollback`` (a ``$set.messages`` checkpoint that is not a compression: Gemini CLI rewrote the history),
    ``model`` (another model than the previous request's)."""
    prev = {c: pl.col(c).shift(1).over("session_key") for c in ("_compressions_seen", "rewinds_seen")}
    first = pl.int_range(pl.len()).over("session_key") == 0
    compressed = pl.col("_compressions_seen") > prev["_compressions_seen"].fill_null(0)
    rewound = pl.col("rewinds_seen") > prev["rewinds_seen"].fill_null(0)
    history = pl.sum_horizontal(*_HIST_COLUMNS)
    rebuilt = (
        (pl.col("checkpoints_seen") > pl.col("checkpoints_seen").shift(1).over("session_key").fill_null(0))
        & (history < history.shift(1).over("session_key"))  # a resume rewrites the history whole
        & compressed.not_()
    )
    switched = first.not_() & (pl.col("model") != pl.col("model").shift(1).over("session_key"))
    names = [
        pl.when(compressed).then(pl.lit("compression")),
        pl.when(rewound).then(pl.lit("rewind")),
        pl.when(rebuilt).then(pl.lit("rollback")),
        pl.when(switched.fill_null(False)).then(pl.lit("model")),
    ]
    event = pl.concat_str(names, separator=",", ignore_nulls=True)
    return requests.with_columns(event=pl.when(event != "").then(event))
