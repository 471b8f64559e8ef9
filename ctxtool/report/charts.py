"""The report's charts as Vega-Lite specs (altair): spend over time, what fills a session's context,
strategies side by side."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxtool.common.wording import plural

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

    out = df.with_columns(
        [
            pl.col(c).dt.strftime("%Y-%m-%dT%H:%M:%SZ")
            for c, t in df.schema.items()
            if isinstance(t, pl.Datetime)
        ]
        + [pl.col(c).cast(pl.String) for c, t in df.schema.items() if t == pl.Date]
    )
    return out.to_dicts()


def _data(values: list[dict[str, Any]]) -> Any:
    """Inline chart data (the page fetches nothing)."""
    import altair as alt

    return alt.Data(values=values)  # type: ignore[no-untyped-call]


def spend_charts(corpus: Corpus) -> list[tuple[str, dict[str, Any]]]:
    """Cost per day by model, tokens per day by project, and cost by model and by project."""
    import altair as alt
    import polars as pl

    req = corpus.requests.filter(pl.col("ts").is_not_null()).with_columns(
        day=pl.col("ts").dt.date(), model=pl.col("model").fill_null("(unknown)")
    )
    # group_by gives its groups in no fixed order: sort on every key, so a page is the same bytes each run
    by_model = (
        req.group_by("day", "model")
        .agg(pl.col("cost").sum(), pl.col("total").sum())
        .sort("day", "model", nulls_last=True)
    )
    by_project = (
        req.group_by("day", "project")
        .agg(pl.col("cost").sum(), pl.col("total").sum())
        .sort("day", "project", nulls_last=True)
    )
    cost = alt.Tooltip("sum(cost):Q", format="$.4f")

    def per_day(
        frame: pl.DataFrame, key: str, measure: Any, axis: str, tooltip: list[Any], title: str
    ) -> Any:
        """Stacked bars of one measure per day, coloured by ``key`` (a model or a project)."""
        return (
            alt.Chart(_data(_values(frame)))
            .mark_bar()
            .encode(
                x=alt.X("day:T", title="day (UTC)", timeUnit="yearmonthdate"),
                y=alt.Y(measure, title=axis),
                color=alt.Color(f"{key}:N", title=key),
                tooltip=["day:T", f"{key}:N", *tooltip],
            )
            .properties(title=title, width="container", height=220)
        )

    cost_day = per_day(
        by_model, "model", "sum(cost):Q", "cost (USD)", [cost, "sum(total):Q"], "Spend per day, by model"
    )
    tokens_day = per_day(
        by_project,
        "project",
        "sum(total):Q",
        "tokens billed",
        ["sum(total):Q", cost],
        "Tokens per day, by project",
    )
    totals = (
        req.group_by("project")
        .agg(pl.col("cost").sum(), pl.col("total").sum())
        .sort(["total", "project"], descending=[True, False], nulls_last=True)
        .head(20)
    )
    per_project = (
        alt.Chart(_data(_values(totals)))
        .mark_bar()
        .encode(
            y=alt.Y("project:N", sort="-x", title=None),
            x=alt.X("total:Q", title="tokens billed"),
            tooltip=["project:N", "total:Q", alt.Tooltip("cost:Q", format="$.4f")],
        )
        .properties(title="Tokens by project (largest 20)", width="container")
    )
    return [
        ("spend-day-model", cost_day.to_dict()),
        ("tokens-day-project", tokens_day.to_dict()),
        ("tokens-project", per_project.to_dict()),
    ]


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
    import altair as alt
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
    chart = alt.layer(*layers).properties(title=title, width="container", height=260)
    return f"session-{key}", chart.to_dict()


@dataclass(frozen=True, slots=True)
class _Scale:
    """A session chart's scale: the session's peak context, the model's limit and Gemini CLI's compression
    threshold (tokens), and the top of the y axis."""

    peak: int
    limit: int
    threshold: int
    top: float

    @classmethod
    def of(cls, req: pl.DataFrame) -> _Scale:
        from ctxtool.measure.tokens import COMPRESSION_THRESHOLD

        limit = int(req.get_column("context_limit").fill_null(0).max() or 0)  # type: ignore[arg-type]
        peak = int(req.get_column("context").fill_null(0).max() or 0)  # type: ignore[arg-type]
        # The chart fits the session's peak; the threshold and the limit are drawn when they fall within it
        # (a chart scaled to a 1M-token limit would show a small session as a line), and named otherwise.
        return cls(peak, limit, int(limit * COMPRESSION_THRESHOLD), max(peak * 1.15, 1.0))


def _composition_bars(req: pl.DataFrame, top: float) -> Any:
    """Per request, its context stacked by what fills it (``PART_LABELS``), on a y axis up to ``top``."""
    import altair as alt
    import polars as pl

    from ctxtool.frames.model import COMPOSITION_COLUMNS

    long = req.select("request", "turn", "timestamp", "model", "context", *COMPOSITION_COLUMNS).unpivot(
        index=["request", "turn", "timestamp", "model", "context"],
        on=list(COMPOSITION_COLUMNS),
        variable_name="part",
        value_name="tokens",
    )
    long = long.with_columns(
        part=pl.col("part").replace_strict(PART_LABELS),
        order=pl.col("part").replace_strict({c: i for i, c in enumerate(COMPOSITION_COLUMNS)}),
    )
    x = alt.X("request:O", title="request", axis=alt.Axis(labelOverlap=True, labelAngle=0))
    return (
        alt.Chart(_data(_values(long)))
        .mark_bar(opacity=0.9)
        .encode(
            x=x,
            y=alt.Y("tokens:Q", stack="zero", title="context (tokens)", scale=alt.Scale(domain=[0, top])),
            color=alt.Color(
                "part:N",
                title="what fills the context (estimate)",
                scale=alt.Scale(domain=list(PART_LABELS.values()), range=_PART_COLORS),
                legend=alt.Legend(orient="bottom", columns=2, labelLimit=400),
            ),
            order=alt.Order("order:Q"),
            tooltip=["request:Q", "turn:Q", "timestamp:N", "model:N", "part:N", "tokens:Q", "context:Q"],
        )
    )


def _limit_rules(scale: _Scale) -> list[Any]:
    """The compression threshold and the model's limit as labelled lines, those within the chart."""
    import altair as alt

    from ctxtool.measure.tokens import COMPRESSION_THRESHOLD

    lines = [
        {"y": y, "label": label}
        for y, label in (
            (scale.threshold, f"compression threshold ({COMPRESSION_THRESHOLD:.0%} of limit)"),
            (scale.limit, "model limit"),
        )
        if 0 < y <= scale.top
    ]
    if not lines:
        return []
    rules = alt.Chart(_data(lines)).mark_rule(color="#d62728", strokeDash=[6, 4])
    rules = rules.encode(y="y:Q", tooltip=["label:N", "y:Q"])
    labels = (
        alt.Chart(_data(lines))
        .mark_text(align="left", dx=4, dy=-6, color="#d62728", fontSize=10)
        .encode(y="y:Q", text="label:N", x=alt.value(0))
    )
    return [rules, labels]


def _event_marks(req: pl.DataFrame) -> list[Any]:
    """The session's events (compressions, rewinds, rollbacks, model switches) as lines at their request."""
    import altair as alt
    import polars as pl

    events = req.filter(pl.col("event").is_not_null()).select(
        "request", "event", "model", history=pl.col("event") != "model"
    )
    if not events.height:
        return []
    marks = alt.Chart(_data(_values(events)))
    at = alt.X("request:O", bandPosition=0)
    # A history event (compression, rewind, rollback) is a labelled line; a model switch alone (Gemini
    # CLI's routing may switch at every request) a faint one, named in its tooltip.
    return [
        marks.mark_rule(strokeDash=[2, 2]).encode(
            x=at,
            color=alt.condition("datum.history", alt.value("#7b4173"), alt.value("#c7b3cf")),
            strokeWidth=alt.condition("datum.history", alt.value(2), alt.value(1)),
            tooltip=["request:O", "event:N", "model:N"],
        ),
        marks.transform_filter("datum.history")
        .mark_text(angle=270, align="right", dx=-4, dy=-4, color="#7b4173", fontSize=10)
        .encode(x=at, text="event:N", y=alt.value(0)),
    ]


def _subtitle(scale: _Scale) -> str:
    """The session's peak, as a share of the model's limit, and the lines that fall above the chart."""
    off_chart = [
        f"{label} {y:,}"
        for y, label in (
            (scale.threshold, "Gemini CLI's compression threshold"),
            (scale.limit, "the model's limit"),
        )
        if y > scale.top
    ]
    subtitle = f"peak {plural(scale.peak, 'token')}" + (
        f" = {scale.peak / scale.limit:.1%} of the model's limit" if scale.limit else ""
    )
    if off_chart:
        subtitle += f"; above this chart: {' and '.join(off_chart)}"
    return subtitle


def compare_charts(rows: Sequence[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Per session and strategy (``ctxtool.compare`` rows): tokens before and after, and fact retention."""
    import altair as alt

    tokens: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    for r in rows:
        session = str(r.get("session", "")).rsplit("/", 1)[-1]
        if r.get("tokens_after") is not None:
            tokens.append(
                {
                    "session": session,
                    "strategy": r["strategy"],
                    "when": "before",
                    "tokens": r["tokens_before"],
                }
            )
            tokens.append(
                {"session": session, "strategy": r["strategy"], "when": "after", "tokens": r["tokens_after"]}
            )
        if r.get("retention") is not None:
            kept.append({"session": session, "strategy": r["strategy"], "retention": r["retention"]})
    before_after = (
        alt.Chart(_data(tokens))
        .mark_bar()
        .encode(
            x=alt.X("strategy:N", title=None),
            xOffset=alt.XOffset("when:N", sort=["before", "after"]),
            y=alt.Y("tokens:Q", title="history tokens (Gemini CLI's estimate)"),
            color=alt.Color("when:N", sort=["before", "after"], title=None),
            column=alt.Column("session:N", title=None),
            tooltip=["session:N", "strategy:N", "when:N", "tokens:Q"],
        )
        .properties(title="Tokens before and after each strategy", width=220, height=200)
    )
    retention = (
        alt.Chart(_data(kept))
        .mark_bar()
        .encode(
            x=alt.X("strategy:N", title=None),
            y=alt.Y("retention:Q", title="facts kept (%)", scale=alt.Scale(domain=[0, 100])),
            color=alt.Color("strategy:N", legend=None),
            column=alt.Column("session:N", title=None),
            tooltip=["session:N", "strategy:N", "retention:Q"],
        )
        .properties(title="Fact retention", width=220, height=200)
    )
    return [("compare-tokens", before_after.to_dict()), ("compare-retention", retention.to_dict())]
