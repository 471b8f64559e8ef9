"""The shape of the reports, without polars: the columns each ``--by`` report shows, and its totals row.

The frames (``ctxtool.frames.query``) and the polars-free ``stats`` path (``ctxtool.frames.tally``) both take
them from here, so a report has one set of columns and one totals rule whichever path made it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ctxtool.measure.tokens import cache_ratio
from ctxtool.session.schema import TOKEN_KEYS as TOKEN_COLUMNS

# 2: input excludes cached (prompt_tokens has both), models is a list. 3: one accounting
# (ctxtool.measure.tokens): a total recorded as 0 counts its parts; diff's recorded figures are stats' (input
# without cached, prompt_tokens); read.total_mismatches.
SCHEMA_VERSION = 3

# What fills the context of a request: an estimate, see with_composition. They add up to `context`.
COMPOSITION_COLUMNS = ("ctx_overhead", "ctx_prompts", "ctx_model", "ctx_tool_io")


# Columns each report shows, in order (docs/json.md documents every one).
# The columns of every report that sums requests by one key (model, project, day, week, month).
_AGGREGATE_COLUMNS = [
    "sessions",
    "requests",
    *TOKEN_COLUMNS,
    "peak_context",
    "cache_ratio",
    "cost",
    "unpriced",
]

REPORT_COLUMNS: dict[str, list[str]] = {
    "turn": [
        "session",
        "derived_from",
        "compacted_at",
        "turn",
        "prompt",
        "start",
        "duration_s",
        "requests",
        *TOKEN_COLUMNS,
        "peak_context",
        "context_limit",
        "context_share",
        "cache_ratio",
        "tool_calls",
        "tool_errors",
        "compressed",
        "live",
        "models",
        "cost",
        "unpriced",
        *COMPOSITION_COLUMNS,
    ],
    "request": [
        "session",
        "derived_from",
        "compacted_at",
        "turn",
        "message_id",
        "timestamp",
        "model",
        "model_inferred",
        *TOKEN_COLUMNS,
        "context",
        "context_limit",
        "context_share",
        "cache_ratio",
        "tool_calls",
        "live",
        "cost",
        *COMPOSITION_COLUMNS,
        "event",
    ],
    "session": [
        "session",
        "session_id",
        "derived_from",
        "compacted_at",
        "project",
        "kind",
        "subagents",
        "start",
        "end",
        "turns",
        "requests",
        *TOKEN_COLUMNS,
        "context",
        "peak_context",
        "context_limit",
        "context_share",
        "cache_ratio",
        "compressions",
        "rewinds",
        "tool_calls",
        "tool_errors",
        "models",
        "cost",
        "unpriced",
        "hidden_requests",
        "hidden_input",
        "hidden_output",
        "hidden_cost",
        "file",
        *COMPOSITION_COLUMNS,
    ],
    "model": ["model", *_AGGREGATE_COLUMNS],
    "project": ["project", *_AGGREGATE_COLUMNS],
    "day": ["day", *_AGGREGATE_COLUMNS],
    "week": ["week", *_AGGREGATE_COLUMNS],
    "month": ["month", *_AGGREGATE_COLUMNS],
}


# Summed in a totals row (as integers); the peaks take their largest value; cost its known part.
_SUMMED = frozenset(
    (
        *TOKEN_COLUMNS,
        "prompt_tokens",
        "requests",
        "sessions",
        "tool_calls",
        "tool_errors",
        "turns",
        "compressions",
        "unpriced",
        *COMPOSITION_COLUMNS,
    )
)
_PEAKS = frozenset(("peak_context", "context", "context_share"))


def totals_of(columns: Sequence[str], values: Callable[[str], list[Any]]) -> dict[str, Any]:
    """A totals row of a report with ``columns`` (``values(column)``: its values): sums of the additive
    columns, max of the peaks, the known part of the cost summed exactly (``math.fsum``: the correctly
    rounded sum, whatever the order of the rows), null only when no row has a known price (``unpriced``
    says how many requests are missing from it); ``cache_ratio`` of the sums."""
    out: dict[str, Any] = {}
    for col in columns:
        if col in _SUMMED:
            out[col] = sum(v for v in values(col) if v is not None)
        elif col in _PEAKS:
            out[col] = max((v for v in values(col) if v is not None), default=None)
        elif col == "cost":
            known = [v for v in values(col) if v is not None]
            out[col] = math.fsum(known) if known or not values(col) else None
    prompt = out.get("prompt_tokens", out.get("input"))
    if prompt and (ratio := cache_ratio(out.get("cached", 0), prompt)) is not None:
        out["cache_ratio"] = ratio
    return out


class RowTable:
    """A report's rows without polars (``ctxtool.frames.tally``): the few things a renderer asks of a frame
    (``columns``, ``height``, ``get_column``, ``to_dicts``, ``head``)."""

    __slots__ = ("_rows", "columns")

    def __init__(self, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
        self.columns = list(columns)
        self._rows = rows

    @property
    def height(self) -> int:
        return len(self._rows)

    def get_column(self, name: str) -> Column:
        if name not in self.columns:
            raise KeyError(name)
        return Column(row[name] for row in self._rows)

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(row) for row in self._rows]

    def head(self, n: int) -> RowTable:
        return RowTable(self.columns, self._rows[:n])


class Column(list[Any]):
    """A column of a :class:`RowTable` (a list, with polars' ``to_list``)."""

    def to_list(self) -> list[Any]:
        return list(self)
