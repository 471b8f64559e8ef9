"""The report's charts as Vega-Lite 5 specs, written as plain dicts: spend over time, what fills a session's
context, strategies side by side.

Plain dicts rather than Altair: Altair's import and its JSON-schema validation of every spec took most of the
page's build time, for specs that are a few fixed shapes. The page's runtime (``ctxtool.report.page``) draws
them with Vega-Lite 5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxtool.common.wording import plural
from ctxtool.measure.tokens import COMPRESSION_THRESHOLD

if TYPE_CHECKING:
    import polars as pl

    from ctxtool.frames.model import Corpus

PART_LABELS = {
    "ctx_overhead": "overhead (system prompt, tools, environment)",
    "ctx_prompts": "prompts",
    "ctx_model": "model turns",
    "ctx_tool_io": "tool calls and outputs",
}
_PART_COLORS = ["#9e9e9e", "#4c78a8", "#f58518", "#54a24b"]


def _values(df: pl.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts (datetimes and dates as ISO text)."""
    import polars as pl

    iso = pl.col(pl.Datetime).dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    return df.with_columns(iso, pl.col(pl.Date).cast(pl.String)).to_dicts()


SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"

_TYPES = {"Q": "quantitative", "N": "nominal", "O": "ordinal", "T": "temporal"}


def _field(shorthand: str, **props: Any) -> dict[str, Any]:
    """An encoding from Vega-Lite's shorthand, ``[aggregate(]field[)]:T``, plus ``props``."""
    name, kind = shorthand.rsplit(":", 1)
    encoding: dict[str, Any] = {}
    if name.endswith(")") and "(" in name:
        encoding["aggregate"], name = name[:-1].split("(", 1)
    return {**encoding, "field": name, "type": _TYPES[kind], **props}


def _chart(
    values: list[dict[str, Any]], mark: str | dict[str, Any], *, top: bool = False, **props: Any
) -> dict[str, Any]:
    """One view: its inline data (the page fetches nothing), its mark and ``props`` (encoding, title…);
    ``top``: a page-level spec, its schema named."""
    chart = {"data": {"values": values}, "mark": {"type": mark} if isinstance(mark, str) else mark, **props}
    return {"$schema": SCHEMA, **chart} if top else chart


SERIES = 10
"""At most this many series (colours) in a chart: the largest ``SERIES - 1`` and "other"."""


def _legend(label_expr: str | None = None) -> dict[str, Any]:
    """A legend under the chart, one entry a line, so it fits a phone's width (labels cut at 260 px, or by
    ``label_expr``; the tooltips hold them whole)."""
    legend: dict[str, Any] = {"orient": "bottom", "direction": "vertical", "labelLimit": 260}
    return legend | ({"labelExpr": label_expr} if label_expr else {})


_TOKENS_AXIS = {"format": "~s"}  # 1.2M, 350k: SI ticks
_COST_AXIS = {"format": "$~s"}
_BAR_ROW_PX = 22  # the height of a project's row in the chart by project (Vega-Lite's default step is 20)
# A Vega expression: a label longer than 28 characters keeps its last 27 (a path's end names it).
_SHORT_LABEL = "length(datum.label) > 28 ? '…' + slice(datum.label, -27) : datum.label"


def _sums(frame: pl.DataFrame, *keys: str) -> pl.DataFrame:
    """``cost`` and ``total`` summed per ``keys``, the costs by ``math.fsum``: polars adds a group's floats in
    an order that depends on its thread count, and the page's bytes would too (0.075867 or
    0.07586700000000002)."""
    import polars as pl

    sums = frame.group_by(*keys).agg(pl.col("cost").drop_nulls(), pl.col("total").sum())
    costs = [math.fsum(c) for c in sums.get_column("cost").to_list()]
    return sums.with_columns(pl.Series("cost", costs, dtype=pl.Float64))


def _top_series(frame: pl.DataFrame, key: str, measure: str) -> pl.DataFrame:
    """``frame`` (per ``day`` and ``key``) with ``key`` kept for its ``SERIES - 1`` largest values by
    ``measure`` and "other" for the rest, so a chart has at most ``SERIES`` colours."""
    import polars as pl

    ranked = _sums(frame, key).sort([measure, key], descending=[True, False], nulls_last=True).get_column(key)
    if ranked.len() <= SERIES:
        return frame
    kept = ranked.head(SERIES - 1).implode()
    other = pl.when(pl.col(key).is_in(kept)).then(pl.col(key)).otherwise(pl.lit("other"))
    return _sums(frame.with_columns(other), "day", key).sort("day", key, nulls_last=True)


def spend_charts(corpus: Corpus) -> list[tuple[str, dict[str, Any]]]:
    """Cost per day by model, tokens per day by project, and tokens by project."""
    import polars as pl

    req = corpus.requests.filter(pl.col("ts").is_not_null()).with_columns(
        day=pl.col("ts").dt.date(), model=pl.col("model").fill_null("(unknown)")
    )
    spend = _per_day(req, "model", "cost", "cost (USD)", "Spend per day, by model")
    tokens = _per_day(req, "project", "total", "tokens billed", "Tokens per day, by project")
    return [("spend-day-model", spend), ("tokens-day-project", tokens), ("tokens-project", _per_project(req))]


def _per_day(req: pl.DataFrame, key: str, measure: str, axis: str, title: str) -> dict[str, Any]:
    """Stacked bars of ``measure`` (``cost`` or ``total``) per day, coloured by ``key`` (a model or a
    project), at most ``SERIES`` colours."""
    # group_by gives its groups in no fixed order: sort on every key, so a page is the same bytes each run
    frame = _sums(req, "day", key).sort("day", key, nulls_last=True)
    sums = {"cost": _field("sum(cost):Q", format="$.4f"), "total": _field("sum(total):Q", format=",")}
    ticks = _COST_AXIS if measure == "cost" else _TOKENS_AXIS
    encoding = {
        "x": _field("day:T", title="day (UTC)", timeUnit="yearmonthdate"),
        "y": _field(f"sum({measure}):Q", title=axis, axis=ticks),
        "color": _field(f"{key}:N", title=key, legend=_legend(_SHORT_LABEL)),
        "tooltip": [_field("day:T"), _field(f"{key}:N"), sums.pop(measure), *sums.values()],
    }
    values = _values(_top_series(frame, key, measure))
    return _chart(values, "bar", top=True, encoding=encoding, title=title, width="container", height=220)


def _per_project(req: pl.DataFrame) -> dict[str, Any]:
    """Tokens billed by project, the largest 20, the largest first."""
    ranked = _sums(req, "project").sort(["total", "project"], descending=[True, False], nulls_last=True)
    totals = ranked.head(20)
    # A long project path is cut at its start on the axis; the tooltip holds it whole.
    axis = {"labelLimit": 180, "labelExpr": _SHORT_LABEL}
    encoding = {
        "y": _field("project:N", sort="-x", title=None, axis=axis),
        "x": _field("total:Q", title="tokens billed", axis=_TOKENS_AXIS),
        "tooltip": [_field("project:N"), _field("total:Q", format=","), _field("cost:Q", format="$.4f")],
    }
    # A number, not Vega-Lite's discrete (step) height: with a step height any fit autosize makes
    # Vega-Lite warn 'Dropping "fit-y"' in the browser's console. A bar row per project.
    fit = {"type": "fit-x", "contains": "padding"}
    props: dict[str, Any] = {"title": "Tokens by project (largest 20)", "width": "container"}
    props |= {"height": _BAR_ROW_PX * max(totals.height, 1), "autosize": fit}
    return _chart(_values(totals), "bar", top=True, encoding=encoding, **props)


def largest_sessions(corpus: Corpus, n: int) -> list[str]:
    """Keys of the ``n`` sessions with the largest peak context (live history), largest first."""
    import polars as pl

    peaks = (
        corpus.requests.filter(pl.col("live"))
        .group_by("session_key")
        .agg(pl.col("context").max().alias("peak"), pl.col("session").first())
        .sort(["peak", "session"], descending=[True, False])
    )
    return peaks.head(n).get_column("session_key").to_list()


def session_chart(corpus: Corpus, key: str) -> tuple[str, dict[str, Any]]:
    """Context per request of one session, stacked by composition, against Gemini CLI's compression
    threshold (and the model's limit when the chart reaches it), with its events marked."""
    import polars as pl

    req = (
        corpus.requests.filter(pl.col("session_key") == key)
        .sort("position")
        .with_columns(request=pl.int_range(1, pl.len() + 1))
    )
    name = str(req.get_column("session")[0])
    scale = _Scale.of(req)
    layers = [_composition_bars(req, scale.top), *_limit_rules(scale), *_event_marks(req)]
    title = {"text": f"Context per request: {name}", "subtitle": _subtitle(scale)}
    spec = {"$schema": SCHEMA, "layer": layers, "title": title, "width": "container", "height": 260}
    return f"session-{key}", spec


@dataclass(frozen=True, slots=True)
class _Scale:
    """A session chart's scale (tokens): the peak context, the model's limit, Gemini CLI's compression
    threshold and the top of the y axis."""

    peak: int
    limit: int
    threshold: int
    top: float

    @classmethod
    def of(cls, req: pl.DataFrame) -> _Scale:
        limit = int(req.get_column("context_limit").fill_null(0).max() or 0)  # type: ignore[arg-type]
        peak = int(req.get_column("context").fill_null(0).max() or 0)  # type: ignore[arg-type]
        # The chart fits the session's peak; the threshold and the limit are drawn when they fall within it
        # (a chart scaled to a 1M-token limit would show a small session as a line), and named otherwise.
        return cls(peak, limit, int(limit * COMPRESSION_THRESHOLD), max(peak * 1.15, 1.0))


def _composition_bars(req: pl.DataFrame, top: float) -> dict[str, Any]:
    """Per request, its context stacked by what fills it (``PART_LABELS``), on a y axis up to ``top``."""
    import polars as pl

    from ctxtool.frames.model import COMPOSITION_COLUMNS

    keys = ["request", "turn", "timestamp", "model", "context"]
    long = req.select(*keys, *COMPOSITION_COLUMNS).unpivot(
        index=keys, on=list(COMPOSITION_COLUMNS), variable_name="part", value_name="tokens"
    )
    long = long.with_columns(
        part=pl.col("part").replace_strict(PART_LABELS),
        order=pl.col("part").replace_strict({c: i for i, c in enumerate(COMPOSITION_COLUMNS)}),
    )
    scale = {"domain": [0, top]}
    y = _field("tokens:Q", stack="zero", title="context (tokens)", scale=scale, axis=_TOKENS_AXIS)
    parts = {"domain": list(PART_LABELS.values()), "range": _PART_COLORS}
    color = _field("part:N", title="what fills the context (estimate)", scale=parts, legend=_legend())
    tips = ("request:Q", "turn:Q", "timestamp:N", "model:N", "part:N", "tokens:Q", "context:Q")
    x = _field("request:O", title="request", axis={"labelOverlap": True, "labelAngle": 0})
    encoding = {"x": x, "y": y, "color": color, "order": _field("order:Q"), "tooltip": [*map(_field, tips)]}
    return _chart(_values(long), {"type": "bar", "opacity": 0.9}, encoding=encoding)


def _limit_rules(scale: _Scale) -> list[dict[str, Any]]:
    """The compression threshold and the model's limit as labelled lines, those within the chart."""
    threshold = f"compression threshold ({COMPRESSION_THRESHOLD:.0%} of limit)"
    named = ((scale.threshold, threshold), (scale.limit, "model limit"))
    lines = [{"y": y, "label": label} for y, label in named if 0 < y <= scale.top]
    if not lines:
        return []
    rules = _chart(
        lines,
        {"type": "rule", "color": "#d62728", "strokeDash": [6, 4]},
        encoding={"y": _field("y:Q"), "tooltip": [_field("label:N"), _field("y:Q", format=",")]},
    )
    labels = _chart(
        lines,
        {"type": "text", "align": "left", "dx": 4, "dy": -6, "color": "#d62728", "fontSize": 10},
        encoding={"y": _field("y:Q"), "text": _field("label:N"), "x": {"value": 0}},
    )
    return [rules, labels]


def _event_marks(req: pl.DataFrame) -> list[dict[str, Any]]:
    """The session's events (compressions, rewinds, rollbacks, model switches) as lines at their request."""
    import polars as pl

    events = req.filter(pl.col("event").is_not_null()).select(
        "request", "event", "model", history=pl.col("event") != "model"
    )
    if not events.height:
        return []
    values = _values(events)
    at, history = _field("request:O", bandPosition=0), {"test": "datum.history"}
    # A history event (compression, rewind, rollback) is a labelled line; a model switch alone (Gemini
    # CLI's routing may switch at every request) a faint one, named in its tooltip.
    color = {"condition": {**history, "value": "#7b4173"}, "value": "#c7b3cf"}
    rule: dict[str, Any] = {"x": at, "color": color}
    rule["strokeWidth"] = {"condition": {**history, "value": 2}, "value": 1}
    rule["tooltip"] = [_field("request:O"), _field("event:N"), _field("model:N")]
    text = {"type": "text", "angle": 270, "align": "right", "dx": -4, "dy": -4, "color": "#7b4173"}
    label = {"x": at, "text": _field("event:N"), "y": {"value": 0}}
    return [
        _chart(values, {"type": "rule", "strokeDash": [2, 2]}, encoding=rule),
        _chart(values, text | {"fontSize": 10}, transform=[{"filter": "datum.history"}], encoding=label),
    ]


def _subtitle(scale: _Scale) -> list[str]:
    """The session's peak, as a share of the model's limit, and the lines that fall above the chart, one line
    each."""
    lines = ((scale.threshold, "Gemini CLI's compression threshold"), (scale.limit, "the model's limit"))
    off_chart = [f"{label} {y:,}" for y, label in lines if y > scale.top]
    subtitle = [
        f"peak {plural(scale.peak, 'token')}"
        + (f" = {scale.peak / scale.limit:.1%} of the model's limit" if scale.limit else "")
    ]
    if off_chart:
        subtitle += ["above this chart:", *off_chart]
    return subtitle


def compare_charts(rows: Sequence[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Per session and strategy (``ctxtool.compare`` rows): tokens before and after, and fact retention."""
    tokens: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    for r in rows:
        run = {"session": str(r.get("session", "")).rsplit("/", 1)[-1], "strategy": r.get("strategy")}
        if r.get("tokens_after") is not None:
            tokens += [{**run, "when": when, "tokens": r[f"tokens_{when}"]} for when in ("before", "after")]
        if r.get("retention") is not None:
            kept.append({**run, "retention": r["retention"]})
    before_after = _per_strategy(
        tokens,
        "Tokens before and after each strategy",
        ("when:N", "tokens:Q"),
        xOffset=_field("when:N", sort=["before", "after"]),
        y=_field("tokens:Q", title="history tokens (Gemini CLI's estimate)", axis=_TOKENS_AXIS),
        color=_field("when:N", sort=["before", "after"], title=None),
    )
    retention = _per_strategy(
        kept,
        "Fact retention",
        ("retention:Q",),
        y=_field("retention:Q", title="facts kept (%)", scale={"domain": [0, 100]}),
        color=_field("strategy:N", legend=None),
    )
    return [("compare-tokens", before_after), ("compare-retention", retention)]


def _per_strategy(
    values: list[dict[str, Any]], title: str, shown: Sequence[str], **encoding: Any
) -> dict[str, Any]:
    """Bars per strategy, a panel per session; the tooltip names the session, the strategy and ``shown``."""
    encoding = {"x": _field("strategy:N", title=None), **encoding, "column": _field("session:N", title=None)}
    encoding["tooltip"] = [_field(s) for s in ("session:N", "strategy:N", *shown)]
    return _chart(values, "bar", top=True, encoding=encoding, title=title, width=220, height=200)
