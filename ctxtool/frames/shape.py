"""The shape of the reports, without polars: one specification per column of the ``--by`` reports.

Each column is declared once (:class:`ColumnSpec`): its name, type, the reports that carry it, how the totals
row takes it, its header, format and place in a table, when a narrow table drops it, and what it means. The
engine, the frames, the tables (``ctxtool.render.tables``) and docs/json.md's "Fields of the rows" all read
it (``tests/test_column_spec.py`` holds them to it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from ctxtool.measure.tokens import cache_ratio

if TYPE_CHECKING:
    import polars as pl

# 2: input excludes cached (prompt_tokens has both), models is a list. 3: one accounting
# (ctxtool.measure.tokens): a total recorded as 0 counts its parts; diff's recorded figures are stats' (input
# without cached, prompt_tokens); read.total_mismatches.
SCHEMA_VERSION = 3

# What fills the context of a request: an estimate, see with_composition. They add up to `context`.
COMPOSITION_COLUMNS = ("ctx_overhead", "ctx_prompts", "ctx_model", "ctx_tool_io")

# The reports, as ``--by`` names them (``ctxtool.common.choices.BY_CHOICES``), in its order.
GRAINS = ("turn", "request", "session", "model", "project", "day", "week", "month", "user", "machine")
_ROWS = ("turn", "request", "session")  # the reports of one row per turn, request or session
_GROUPS = ("model", "project", "day", "week", "month", "user", "machine")  # sums of requests by one key
_ALL = GRAINS
_BUT_REQUEST = tuple(g for g in GRAINS if g != "request")

# How a table shows a value (``ctxtool.render.tables.cell``); the first five are right-aligned.
Format = (
    Literal["count", "percent", "share", "cost", "duration"]
    | Literal["minute", "second", "date", "flag", "mark", "short id", "text"]
)
NUMBER_FORMATS: frozenset[str] = frozenset(("count", "percent", "share", "cost", "duration"))

# How the totals row takes a column: ``sum`` (as integers), ``max`` (a peak), ``known sum`` (a cost: the
# requests of known price, summed exactly), a function of the totals row's sums (a ratio), or not at all.
Total = Literal["sum", "max", "known sum"] | Callable[[Mapping[str, Any]], Any] | None


# The polars dtype of a column in the frames' report, by its ``type``: a list of strings is one comma-joined
# string there (``render.formats.with_lists`` splits it).
DTYPES: dict[str, str] = {"str": "String", "int": "Int64", "float": "Float64", "bool": "Boolean"}
DTYPES.update({"datetime": "Datetime(us, UTC)", "date": "Date", "list[str]": "String"})


class ColumnSpec(msgspec.Struct, frozen=True):
    """One column of the ``stats`` reports.

    ``type``: its values in JSON (``str``, ``int``, ``float``, ``bool``, ``datetime``, ``date``,
    ``list[str]``; null where missing). ``reports``: the ``--by`` reports that carry it. ``description``:
    what it is and how it is derived, the row docs/json.md gives it. ``table``: the reports whose table shows
    it, at ``place`` (left to right), as ``header`` (default: its name); ``drop``: the narrow table drops the
    lowest first (None: never); ``least``/``most``: a text column that gives way, down to ``least`` cells,
    and takes up to ``most`` where there is room. ``in_frames``: False for a column the frames' report does
    not select, added as the report is written (``prompt_tokens``). ``dtype``: its polars dtype when its
    type does not give it (:data:`DTYPES`): a count polars makes as ``UInt32``."""

    name: str
    type: str
    format: Format
    reports: tuple[str, ...]
    description: str
    total: Total = None
    table: tuple[str, ...] = ()
    place: int | None = None
    header: str | None = None
    drop: int | None = None
    least: int | None = None
    most: int | None = None
    in_frames: bool = True
    dtype: str | None = None

    @property
    def heading(self) -> str:
        """What a table's header calls it."""
        return self.header or self.name

    @property
    def frame_dtype(self) -> str:
        """The name of its polars dtype in the frames' report (the tally's CSV and Parquet take it too)."""
        return self.dtype or DTYPES[self.type]


def _cache_ratio_of_sums(sums: Mapping[str, Any]) -> float | None:
    """The totals row's ``cache_ratio``: of its sums (``prompt_tokens``, or ``input`` in a frame that still
    holds Gemini CLI's prompt count), never a sum or a mean of the rows' ratios."""
    prompt = sums.get("prompt_tokens", sums.get("input"))
    return cache_ratio(sums.get("cached", 0), prompt) if prompt else None


_ESTIMATE = "**estimate**"
_CONTEXT = f"{_ESTIMATE}: the part of `context`"

# Every column, in the order the reports write them (a report writes the ones that name it in ``reports``).
# ``place`` and ``drop`` leave gaps, so that a new column takes a number between two.
COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec("session", "str", "short id", _ROWS, "the session's file name without its extension",
               table=_ROWS, place=10),
    ColumnSpec("session_id", "str", "text", ("session",), "`sessionId` from the file (not unique: the a2a "
               "server writes a constant)"),
    ColumnSpec("derived_from", "str", "text", _ROWS, "for a session `ctxtool compact` wrote from another "
               "(`--as-new-session`, `--output`), that session's `sessionId`; its messages are copies "
               "without `tokens`, so it adds no requests, tokens or cost (the spend stays with the "
               "original)"),
    ColumnSpec("compacted_at", "str", "text", _ROWS, "for a session `ctxtool compact --in-place` compacted "
               "(the `ctxtoolCompaction` mark of the `$set` record it appended), when it last did; its "
               "requests stay billed"),
    ColumnSpec("turn", "int", "count", ("turn", "request"), "turn number within the session, from 1 (0: "
               "before the first prompt)", table=("turn", "request"), place=20),
    ColumnSpec("prompt", "str", "text", ("turn",), "the prompt's first 80 characters, whitespace folded",
               table=("turn",), place=30, drop=230, least=16, most=40),
    ColumnSpec("message_id", "str", "text", ("request",), "id of the `gemini` message that recorded the "
               "request"),
    ColumnSpec("timestamp", "str", "second", ("request",), "the request message's timestamp as recorded",
               table=("request",), place=50, drop=130),
    ColumnSpec("model", "str", "text", ("request", "model"), "model of the request; of the row's requests in "
               "`--by model` (`(unknown)`: none named)", table=("request", "model"), place=60, drop=220,
               least=14, most=30),
    ColumnSpec("model_inferred", "bool", "flag", ("request",), "`true` when the request's record names no "
               "model (Gemini CLI 0.61 writes an empty answer that way) and `model` is the one of the "
               "request before it in the session (else after), so it is priced"),
    ColumnSpec("project", "str", "text", ("session", "project"), "the project: `.project_root` path or the "
               "folder name under `tmp/`", table=("session", "project"), place=40, drop=210, least=12,
               most=24),
    ColumnSpec("kind", "str", "text", ("session",), "`main` or `subagent`"),
    ColumnSpec("subagents", "int", "count", ("session",), "subagent sessions rolled up into this row",
               dtype="UInt32"),
    ColumnSpec("day", "date", "date", ("day",), "date of the requests, in UTC or `--timezone`",
               table=("day",), place=70),
    ColumnSpec("week", "date", "date", ("week",), "the Monday (a date) of the requests' week, in UTC or "
               "`--timezone`", table=("week",), place=80),
    ColumnSpec("month", "str", "text", ("month",), "`YYYY-MM` of the requests, in UTC or `--timezone`",
               table=("month",), place=90),
    ColumnSpec("user", "str", "text", ("user",), "who the requests are of: a dataset's `user` (`export "
               "--user`), else `$CTXTOOL_USER` or the login name", table=("user",), place=92, least=8,
               most=24),
    ColumnSpec("machine", "str", "text", ("machine",), "the machine the requests come from: a dataset's "
               "`machine` (`export --machine`), else `$CTXTOOL_MACHINE` or the host name", table=("machine",),
               place=94, least=8, most=24),
    ColumnSpec("start", "datetime", "minute", ("turn", "session"), "first timestamp of the turn or session",
               table=("turn", "session"), place=100, drop=120),
    ColumnSpec("end", "datetime", "minute", ("session",), "last timestamp of the session"),
    ColumnSpec("duration_s", "float", "duration", ("turn",), "seconds from the turn's first to its last "
               "message", table=("turn",), place=110, header="time", drop=110),
    ColumnSpec("turns", "int", "count", ("session",), "turns in the session, the rows `--by turn` lists for "
               "it: one per prompt, plus turn 0 when it holds a request or a compression; with `--live`, "
               "those still in the live history; a subagent's are added to its parent's row", total="sum",
               table=("session",), place=120, drop=170, dtype="UInt32"),
    ColumnSpec("sessions", "int", "count", _GROUPS, "distinct sessions with requests in the row", total="sum",
               table=_GROUPS, place=130, drop=160, dtype="UInt32"),
    ColumnSpec("requests", "int", "count", _BUT_REQUEST, "requests (gemini messages that carry `tokens`, "
               "all-zero ones included)", total="sum", table=_BUT_REQUEST, place=140, header="req", drop=200,
               dtype="UInt32"),
    ColumnSpec("input", "int", "count", _ALL, "prompt tokens not served from the cache (`promptTokenCount` − "
               "`cachedContentTokenCount`), as ccusage counts input; `input` + `cached` + `output` + "
               "`thoughts` + `tool` = `total`", total="sum", table=_ALL, place=150, drop=260),
    ColumnSpec("output", "int", "count", _ALL, "response tokens (`candidatesTokenCount`)", total="sum",
               table=_ALL, place=160, drop=240),
    ColumnSpec("cached", "int", "count", _ALL, "prompt tokens served from the cache "
               "(`cachedContentTokenCount`)", total="sum", table=_ALL, place=180, drop=250),
    ColumnSpec("prompt_tokens", "int", "count", _ALL, "the whole prompt (`promptTokenCount`: `input` + "
               "`cached`), what the context held", total="sum", in_frames=False),
    ColumnSpec("thoughts", "int", "count", _ALL, "thinking tokens (`thoughtsTokenCount`), priced as output",
               total="sum", table=_ALL, place=170, drop=150),
    ColumnSpec("tool", "int", "count", _ALL, "tool-use prompt tokens (`toolUsePromptTokenCount`); a table "
               "shows it only where a request recorded some", total="sum", table=_ALL, place=190, drop=60),
    ColumnSpec("total", "int", "count", _ALL, "the response's recorded `total` (`totalTokenCount`) when "
               "above 0, else `input + output + thoughts + tool`: Gemini CLI records `total: 0` when the "
               "API's usage lacks `totalTokenCount` (`chatRecordingService` `recordMessageTokens`). A "
               "recorded total that disagrees with its parts is counted as recorded, and counted in "
               "`read.total_mismatches`", total="sum", table=_ALL, place=200),
    ColumnSpec("context", "int", "count", ("request", "session"), "prompt size of the request; for a "
               "session, of its last live request", total="max"),
    ColumnSpec("peak_context", "int", "count", _BUT_REQUEST, "largest prompt (for a session: over the live "
               "history)", total="max", table=("turn", "session"), place=210, header="peak ctx", drop=180),
    ColumnSpec("context_limit", "int", "count", _ROWS, "the model's context window (Gemini CLI's "
               "`tokenLimit`)", header="limit"),
    ColumnSpec("context_share", "float", "share", _ROWS, "`context` (or `peak_context`) over `context_limit`",
               total="max", table=_ROWS, place=220, header="ctx %", drop=190),
    ColumnSpec("cache_ratio", "float", "percent", _ALL, "`cached / prompt_tokens`: the share of the prompt "
               "served from the cache", total=_cache_ratio_of_sums, table=_ALL, place=230, header="cache %",
               drop=140),
    ColumnSpec("compressions", "int", "count", ("session",), "compression events", total="sum",
               table=("session",), place=250, header="compr.", drop=70, dtype="UInt32"),
    ColumnSpec("rewinds", "int", "count", ("session",), "`$rewindTo` records"),
    ColumnSpec("tool_calls", "int", "count", _ROWS, "tool calls recorded", total="sum",
               table=("turn", "request"), place=240, header="tools", drop=90),
    ColumnSpec("tool_errors", "int", "count", ("turn", "session"), "tool calls recorded with status `error`",
               total="sum", header="tool err"),
    ColumnSpec("compressed", "bool", "mark", ("turn",), "the turn holds a compression event", table=("turn",),
               place=260, drop=80),
    ColumnSpec("live", "bool", "flag", ("turn", "request"), "the request (or the turn's prompt) is still in "
               "the live history", table=("request",), place=270, drop=100),
    ColumnSpec("models", "list[str]", "text", ("turn", "session"), "models used (a list in JSON, JSONL and "
               "Parquet; comma-separated in CSV and tables)"),
    ColumnSpec("cost", "float", "cost", _ALL, "USD from genai-prices. A request whose model's price is "
               "unknown has `null`; a row of several requests sums the ones of known price and is `null` "
               "only when none has one", total="known sum", table=_ALL, place=330),
    ColumnSpec("unpriced", "int", "count", _BUT_REQUEST, "requests in the row whose model's price is "
               "unknown, so missing from `cost` (tables mark such a cost with `+`)", total="sum"),
    ColumnSpec("hidden_requests", "int", "count", ("session",),
               f"{_ESTIMATE}, as the other `hidden_` fields, apart from every billed figure: the "
               "compression calls Gemini CLI makes but never records (0.61: a summary and a verification "
               "probe per compression, so 2 per `<state_snapshot>` in the file)", dtype="UInt32"),
    ColumnSpec("hidden_input", "int", "count", ("session",),
               f"{_ESTIMATE}: the prompt tokens of those calls; each reads the history as it stood (the "
               "prompt of the last request before the compression, an upper bound)"),
    ColumnSpec("hidden_output", "int", "count", ("session",),
               f"{_ESTIMATE}: the output tokens of those calls, about the summary (4 characters a token)"),
    ColumnSpec("hidden_cost", "float", "cost", ("session",),
               f"{_ESTIMATE}: the cost of those calls, priced at the model of the request before each "
               "compression"),
    ColumnSpec("file", "str", "text", ("session",), "the file read (the `.jsonl` when a `.json`/`.jsonl` "
               "pair was merged)"),
    ColumnSpec("ctx_overhead", "int", "count", _ROWS,
               f"{_CONTEXT} the history does not explain (system prompt, tool declarations, environment). "
               "The four `ctx_` fields add up to `context` exactly; for a turn or a session, summed over "
               "its requests. See [What fills the context](tokens.md#what-fills-the-context)", total="sum",
               table=("turn", "request"), place=290, header="ctx: overhead", drop=40),
    ColumnSpec("ctx_prompts", "int", "count", _ROWS,
               f"{_CONTEXT} that is the user's prompts (text, pastes, attachments, a compression summary)",
               total="sum", table=("turn", "request"), place=300, header="ctx: prompts", drop=30),
    ColumnSpec("ctx_model", "int", "count", _ROWS,
               f"{_CONTEXT} that is the model's turns (its text; thoughts are stripped before a request, as "
               "Gemini CLI does)", total="sum", table=("turn", "request"), place=310, header="ctx: model",
               drop=20),
    ColumnSpec("ctx_tool_io", "int", "count", _ROWS, f"{_CONTEXT} that is tool calls with their outputs",
               total="sum", table=("turn", "request"), place=320, header="ctx: tool I/O", drop=10),
    ColumnSpec("event", "str", "text", ("request",), "what happened to the session's history since its "
               "previous request, comma-separated: `compression`, `rewind` (a `$rewindTo`), `rollback` (a "
               "`$set.messages` checkpoint that shrank the history without a compression), `model` (another "
               "model than the previous request's); empty when nothing did", table=("request",), place=280,
               drop=50),
)  # fmt: skip

SPECS: dict[str, ColumnSpec] = {c.name: c for c in COLUMNS}

# The columns each report writes, in order, and those the frames' report selects (no ``prompt_tokens``).
ROW_COLUMNS: dict[str, list[str]] = {by: [c.name for c in COLUMNS if by in c.reports] for by in GRAINS}
REPORT_COLUMNS: dict[str, list[str]] = {
    by: [c.name for c in COLUMNS if by in c.reports and c.in_frames] for by in GRAINS
}
# What a table shows per report, left to right; machine formats always carry every column.
TABLE_COLUMNS: dict[str, list[str]] = {
    by: [c.name for c in sorted((c for c in COLUMNS if by in c.table), key=lambda c: c.place or 0)]
    for by in GRAINS
}
# When a terminal is too narrow, the first of these go first; a table never drops the others.
DROP_ORDER: tuple[str, ...] = tuple(
    c.name for c in sorted((c for c in COLUMNS if c.drop is not None), key=lambda c: c.drop or 0)
)


def totals_of(columns: Sequence[str], values: Callable[[str], list[Any]]) -> dict[str, Any]:
    """A totals row of a report with ``columns`` (``values(column)``: its values), as each column's
    ``total`` says: sums of the additive columns, max of the peaks, the known part of the cost summed exactly
    (``math.fsum``: the correctly rounded sum, whatever the order of the rows), null only when no row has a
    known price (``unpriced`` says how many requests are missing from it); then the ratios, of the sums."""
    out: dict[str, Any] = {}
    ratios = []
    for col in columns:
        total = SPECS[col].total if col in SPECS else None
        if total == "sum":
            out[col] = sum(v for v in values(col) if v is not None)
        elif total == "max":
            out[col] = max((v for v in values(col) if v is not None), default=None)
        elif total == "known sum":
            known = [v for v in values(col) if v is not None]
            out[col] = math.fsum(known) if known or not values(col) else None
        elif callable(total):
            ratios.append((col, total))
    for col, of_sums in ratios:
        if (value := of_sums(out)) is not None:
            out[col] = value
    return out


class RowTable:
    """A report's rows without polars (``ctxtool.frames.tally``): the few things a renderer asks of a frame
    (``columns``, ``height``, ``get_column``, ``to_dicts``, ``head``)."""

    __slots__ = ("_rows", "columns")

    def __init__(self, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
        self.columns, self._rows = list(columns), rows

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


def frame_of(rows: RowTable) -> pl.DataFrame:
    """A report's rows as a frame: each column of the polars dtype its specification names
    (``ColumnSpec.frame_dtype``): what CSV and Parquet are written from, and ``ctxtool.report`` returns."""
    import polars as pl

    def dtype(name: str) -> pl.DataType:  # (the names of DTYPES and ColumnSpec.dtype)
        return pl.Datetime("us", "UTC") if name == "Datetime(us, UTC)" else getattr(pl, name)()

    return pl.DataFrame(
        [pl.Series(c, rows.get_column(c), dtype=dtype(SPECS[c].frame_dtype)) for c in rows.columns]
    )
