"""One self-contained HTML page of a corpus (``ctxtool report``): spend over time, what fills the context of
the largest sessions, the top context consumers and, given ``compare`` rows, the strategies side by side.

Owns: the page and its charts (Vega-Lite specs built with Altair; the Vega, Vega-Lite and vega-embed
runtime inlined from vl-convert-python, so the page loads nothing from the network). Session text reaches
the page only HTML-escaped (tables) or inside JSON whose ``<``, ``>`` and ``&`` are escaped (chart data),
both by ``ctxtool.markup``, so no session can inject markup or a script. Altair and vl-convert are
imported when a page is built, never by ``ctxtool stats``. Must not print or import rich/typer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ctxtool.markup import escape_html, json_in_html_script
from ctxtool.wording import plural

if TYPE_CHECKING:
    import polars as pl

    from ctxtool.frames import Corpus

PART_LABELS = {
    "ctx_overhead": "overhead (system prompt, tools, environment)",
    "ctx_prompts": "prompts",
    "ctx_model": "model turns",
    "ctx_tool_io": "tool calls and outputs",
}
_PART_COLORS = ["#9e9e9e", "#4c78a8", "#f58518", "#54a24b"]


def _script_json(value: Any) -> str:
    """JSON that is safe inside a ``<script>`` element whatever strings it holds."""
    import orjson

    return json_in_html_script(orjson.dumps(value).decode())


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
    by_model = req.group_by("day", "model").agg(pl.col("cost").sum(), pl.col("total").sum()).sort("day")
    by_project = req.group_by("day", "project").agg(pl.col("cost").sum(), pl.col("total").sum()).sort("day")
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
        .sort("total", descending=True)
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

    from ctxtool.frames import COMPOSITION_COLUMNS
    from ctxtool.tokens import COMPRESSION_THRESHOLD

    req = (
        corpus.requests.filter(pl.col("session_key") == key)
        .sort("position")
        .with_columns(request=pl.int_range(1, pl.len() + 1))
    )
    name = str(req.get_column("session")[0])
    limit = int(req.get_column("context_limit").fill_null(0).max() or 0)  # type: ignore[arg-type]
    peak = int(req.get_column("context").fill_null(0).max() or 0)  # type: ignore[arg-type]
    threshold = int(limit * COMPRESSION_THRESHOLD)
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
    # The chart fits the session's peak; the threshold and the limit are drawn when they fall within it
    # (a chart scaled to a 1M-token limit would show a small session as a line), and named otherwise.
    top = max(peak * 1.15, 1.0)
    x = alt.X("request:O", title="request", axis=alt.Axis(labelOverlap=True, labelAngle=0))
    area = (
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
    lines = [
        {"y": y, "label": label}
        for y, label in (
            (threshold, f"compression threshold ({COMPRESSION_THRESHOLD:.0%} of limit)"),
            (limit, "model limit"),
        )
        if 0 < y <= top
    ]
    off_chart = [
        f"{label} {y:,}"
        for y, label in ((threshold, "Gemini CLI's compression threshold"), (limit, "the model's limit"))
        if y > top
    ]
    rules = alt.Chart(_data(lines)).mark_rule(color="#d62728", strokeDash=[6, 4])
    rules = rules.encode(y="y:Q", tooltip=["label:N", "y:Q"])
    labels = (
        alt.Chart(_data(lines))
        .mark_text(align="left", dx=4, dy=-6, color="#d62728", fontSize=10)
        .encode(y="y:Q", text="label:N", x=alt.value(0))
    )
    events = req.filter(pl.col("event").is_not_null()).select(
        "request", "event", "model", history=pl.col("event") != "model"
    )
    layers: list[Any] = [area, rules, labels] if lines else [area]
    if events.height:
        marks = alt.Chart(_data(_values(events)))
        at = alt.X("request:O", bandPosition=0)
        # A history event (compression, rewind, rollback) is a labelled line; a model switch alone (Gemini
        # CLI's routing may switch at every request) a faint one, named in its tooltip.
        layers.append(
            marks.mark_rule(strokeDash=[2, 2]).encode(
                x=at,
                color=alt.condition("datum.history", alt.value("#7b4173"), alt.value("#c7b3cf")),
                strokeWidth=alt.condition("datum.history", alt.value(2), alt.value(1)),
                tooltip=["request:O", "event:N", "model:N"],
            )
        )
        layers.append(
            marks.transform_filter("datum.history")
            .mark_text(angle=270, align="right", dx=-4, dy=-4, color="#7b4173", fontSize=10)
            .encode(x=at, text="event:N", y=alt.value(0))
        )
    subtitle = f"peak {plural(peak, 'token')}" + (
        f" = {peak / limit:.1%} of the model's limit" if limit else ""
    )
    if off_chart:
        subtitle += f"; above this chart: {' and '.join(off_chart)}"
    title = {"text": f"Context per request: {name}", "subtitle": subtitle}
    chart = alt.layer(*layers).properties(title=title, width="container", height=260)
    return f"session-{key}", chart.to_dict()


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


def _table(rows: pl.DataFrame, columns: Sequence[str], formats: dict[str, str]) -> str:
    head = "".join(f"<th>{escape_html(c)}</th>" for c in columns)
    body = []
    for r in rows.iter_rows(named=True):
        cells = []
        for c in columns:
            v = r[c]
            if v is None:
                text = "–"
            elif c in formats:
                text = format(v, formats[c])
            else:
                text = str(v)
            num = ' class="num"' if isinstance(v, int | float) else ""
            cells.append(f"<td{num}>{escape_html(text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
padding:0 1rem;color:#222}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2.5rem;border-bottom:1px solid #ddd}
.chart{width:100%;margin:1rem 0}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0 1.5rem}
th,td{border-bottom:1px solid #eee;padding:.2rem .6rem;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#555;font-size:.85rem}
"""


def build_report(
    corpus: Corpus,
    *,
    sessions: int = 5,
    top: int = 10,
    compare_rows: Sequence[dict[str, Any]] | None = None,
    redact: bool = True,
    title: str = "ctxtool report",
) -> str:
    """The page, as text. ``sessions``: how many of the largest sessions get a chart; ``top``: items per
    session in the consumers table; ``compare_rows``: ``ctxtool.compare.compare_sessions`` rows."""
    import polars as pl
    import vl_convert

    from ctxtool.composition import top_consumers
    from ctxtool.frames import read_summary, totals

    charts: list[tuple[str, dict[str, Any]]] = []
    sections: list[str] = []
    summary = read_summary(corpus)
    sums = totals(corpus.requests.select("input", "output", "cached", "thoughts", "tool", "total", "cost"))
    cost = sums.get("cost")
    sections.append(
        f"<h1>{escape_html(title)}</h1><p class='note'>{plural(summary['sessions'], 'session')}, "
        f"{plural(summary['requests'], 'request')}, {plural(int(sums.get('total') or 0), 'token')} billed"
        + (f", ${float(cost):,.2f}" if cost is not None else "")
        + ". What fills the context is an estimate: each part of the history is estimated with Gemini "
        "CLI's own estimator and scaled to the prompt tokens recorded for the request; overhead is what the "
        "history does not explain (system prompt, tool declarations, environment).</p>"
    )

    def place(chart_id: str, spec: dict[str, Any]) -> str:
        charts.append((chart_id, spec))
        return f'<div class="chart" id="{escape_html(chart_id)}"></div>'

    sections.append("<h2>Spend over time</h2>")
    for chart_id, spec in spend_charts(corpus):
        sections.append(place(chart_id, spec))

    keys = largest_sessions(corpus, sessions)
    largest = "the largest session" if len(keys) == 1 else f"the {len(keys)} largest sessions"
    sections.append(
        f"<h2>Context per request ({largest})</h2>"
        "<p class='note'>Stacked by what fills it; the dashed line is Gemini CLI's compression threshold. "
        "Compressions, rewinds, rollbacks and model switches are marked.</p>"
    )
    for key in keys:
        chart_id, spec = session_chart(corpus, key)
        sections.append(place(chart_id, spec))

    consumers = top_consumers(corpus, top).filter(
        pl.col("session").is_in(
            corpus.requests.filter(pl.col("session_key").is_in(keys)).get_column("session").unique().implode()
        )
    )
    if redact:
        from ctxtool.secret_scan import redact as redact_text

        consumers = consumers.with_columns(
            pl.Series(
                "target",
                [None if t is None else redact_text(t) for t in consumers.get_column("target").to_list()],
                dtype=pl.String,
            )
        )
    sections.append(
        f"<h2>Top context consumers (at the last request of each, {top} per session)</h2>"
        + _table(
            consumers,
            ["session", "rank", "item", "tool", "target", "count", "tokens", "share"],
            {"tokens": ",", "share": ".1%"},
        )
    )

    if compare_rows:
        sections.append("<h2>Compaction strategies side by side</h2>")
        for chart_id, spec in compare_charts(compare_rows):
            sections.append(place(chart_id, spec))
        cmp = pl.DataFrame(
            [
                {
                    "session": str(r.get("session", "")).rsplit("/", 1)[-1],
                    "strategy": r.get("strategy"),
                    "status": r.get("status"),
                    "tokens_before": r.get("tokens_before"),
                    "tokens_after": r.get("tokens_after"),
                    "retention": r.get("retention"),
                }
                for r in compare_rows
            ],
            schema={
                "session": pl.String,
                "strategy": pl.String,
                "status": pl.String,
                "tokens_before": pl.Int64,
                "tokens_after": pl.Int64,
                "retention": pl.Float64,
            },
        )
        sections.append(
            _table(
                cmp,
                list(cmp.columns),
                {"tokens_before": ",", "tokens_after": ",", "retention": ".1f"},
            )
        )

    bundle: Any = vl_convert.javascript_bundle  # its stub requires the optional snippet
    runtime = str(bundle()).replace("</script", "<\\/script")
    embeds = "\n".join(
        f"vegaEmbed({_script_json('#' + chart_id)}, {_script_json(spec)}, "
        '{"renderer": "svg", "actions": false}).catch(function (e) { console.error(e); });'
        for chart_id, spec in charts
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width'><title>{escape_html(title)}</title>"
        f"<style>{_STYLE}</style></head><body>\n"
        + "\n".join(sections)
        + f"\n<script>{runtime}</script>\n<script>\n{embeds}\n</script>\n</body></html>\n"
    )
