"""The model's types: ``Corpus`` (the frames of a set of sessions), its schemas, the problems met while
reading, and the token and cost expressions every grain shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    pass


from ctxtool.frames.reading import PROBLEM_KINDS, Problem, ProblemKind
from ctxtool.frames.shape import COMPOSITION_COLUMNS, SCHEMA_VERSION
from ctxtool.measure.tokens import DEFAULT_TOKEN_LIMIT, MODEL_LIMITS
from ctxtool.session.schema import TOKEN_KEYS
from ctxtool.session.stamp import MESSAGE_COLUMNS

# Defined without polars (ctxtool.frames.reading, ctxtool.frames.shape) and re-exported here.
__all__ = ["COMPOSITION_COLUMNS", "PROBLEM_KINDS", "SCHEMA_VERSION", "Problem", "ProblemKind"]


TOKEN_COLUMNS = TOKEN_KEYS  # the counts of a request, as Gemini CLI names them
Progress = Callable[[int, int], None]


class _Later:
    """A frame field that may be given as a function that computes the frame, run when it is first read.

    Reports that never read a frame (``stats --by session`` reads neither turns nor tool calls) skip the
    work of building it; anything that reads it gets the same frame as if it had been built at once.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = "_" + name

    def __get__(self, obj: object, objtype: type | None = None) -> pl.DataFrame:
        if obj is None:
            raise AttributeError(self._name)  # no default: the field must be given
        value: pl.DataFrame | Callable[[], pl.DataFrame] = obj.__dict__[self._name]
        if not isinstance(value, pl.DataFrame):
            value = obj.__dict__[self._name] = value()
        return value

    def __set__(self, obj: object, value: pl.DataFrame | Callable[[], pl.DataFrame]) -> None:
        obj.__dict__[self._name] = value


@dataclass
class Corpus:
    """What was read: the frames plus an account of every file."""

    sessions: pl.DataFrame
    messages: pl.DataFrame
    requests: pl.DataFrame
    tool_calls: _Later = _Later()
    turns: _Later = _Later()
    files_read: int = 0
    files_found: int = 0
    bytes_read: int = 0
    problems: list[Problem] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    broken_lines: int = 0
    # Per-file facts kept with a stored corpus (see ctxtool.frames.loading); not part of the frames.
    file_records: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The tool-call rows as read (``tool_calls`` without the turn and session columns joined on): what a
    # stored corpus keeps, the rest being derived again when read. None for a corpus made otherwise (a
    # filtered or live view), which is never stored.
    calls: pl.DataFrame | None = None


MESSAGE_SCHEMA: dict[str, Any] = {
    "message_id": pl.String,
    "type": pl.String,
    "timestamp": pl.String,
    "live": pl.Boolean,
    "text_chars": pl.Int64,
    "content_bytes": pl.Int64,
    "is_prompt": pl.Boolean,
    "is_command": pl.Boolean,
    "is_snapshot": pl.Boolean,
    "compression_info": pl.Boolean,
    "model": pl.String,
    "preview": pl.String,
    "tool_calls": pl.Int64,
    "tool_errors": pl.Int64,
    **dict.fromkeys(TOKEN_COLUMNS, pl.Int64),
    **dict.fromkeys(MESSAGE_COLUMNS[-8:], pl.Int64),
}
TOOL_SCHEMA: dict[str, Any] = {
    "message_id": pl.String,
    "call_id": pl.String,
    "name": pl.String,
    "status": pl.String,
    "timestamp": pl.String,
    "result_bytes": pl.Int64,
    "target": pl.String,
}


SESSION_META_SCHEMA: dict[str, Any] = {
    "session_key": pl.String,
    "group_key": pl.String,
    "parent_ref": pl.String,
    "session": pl.String,
    "session_id": pl.String,
    "project": pl.String,
    "project_dir": pl.String,
    "project_hash": pl.String,
    "kind": pl.String,
    "parent_session_key": pl.String,
    "root_session_key": pl.String,
    "file": pl.String,
    "files": pl.Int64,
    "era": pl.String,
    "summary": pl.String,
    "derived_from": pl.String,
    "compacted_at": pl.String,
    "start_time": pl.String,
    "last_updated": pl.String,
    "broken_lines": pl.Int64,
    "invalid_utf8_lines": pl.Int64,
    "first_invalid_utf8_line": pl.Int64,
    "first_broken_line": pl.Int64,
    "first_overlong_line": pl.Int64,
    "rewinds": pl.Int64,
    "checkpoints": pl.Int64,
    "live_messages": pl.Int64,
}


TS_TYPE = pl.Datetime("us", "UTC")
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
