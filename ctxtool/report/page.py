"""One self-contained HTML page of a corpus (``ctxtool report``): spend over time, what fills the context of
the largest sessions, the top context consumers and, given ``compare`` rows, the strategies side by side.

Owns: the page and its charts (Vega-Lite 5 specs as plain dicts, ``ctxtool.report.charts``; the Vega,
Vega-Lite and vega-embed runtime inlined from the files django-js-lib-vega-embed ships, so the page loads
nothing from the network). Session text reaches the page only HTML-escaped (tables) or inside JSON whose
``<``, ``>`` and ``&`` are escaped (chart data), both by ``ctxtool.common.markup``, so no session can inject
markup or a script. Must not print or import rich/typer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ctxtool.common.markup import escape_html, json_in_html_script
from ctxtool.common.wording import plural

if TYPE_CHECKING:
    from ctxtool.frames.model import Corpus
from ctxtool.report.charts import compare_charts, largest_sessions, session_chart, spend_charts

RUNTIME_PACKAGE = "js_lib_vega_embed"
RUNTIME_FILE = "static/js_lib_vega_embed/vega-embed-full.js"
"""Vega 5, Vega-Lite 5 and vega-embed 6 in one minified file (the three files the package also ships
apart, concatenated): about 0.8 MB, BSD-3-Clause (University of Washington Interactive Data Lab)."""
_CUT = 120
"""A long cell (a tool's target: a path, a command) is cut at this many characters, its whole text in its
``title`` (shown on hover)."""


def chart_runtime() -> str:
    """The chart runtime's JavaScript, read from the installed package's files (its Django app, ``apps.py``,
    is never imported), made safe to inline in a ``<script>`` element."""
    from importlib.resources import files

    source = files(RUNTIME_PACKAGE).joinpath(RUNTIME_FILE).read_text(encoding="utf-8")
    notice = (
        "/* Vega, Vega-Lite, vega-embed: BSD-3-Clause, (c) University of Washington Interactive Data Lab */\n"
    )
    return notice + source.replace("</script", "<\\/script")


def _script_json(value: Any) -> str:
    """JSON that is safe inside a ``<script>`` element whatever strings it holds."""
    import orjson

    return json_in_html_script(orjson.dumps(value).decode())


def _table(
    rows: Iterable[dict[str, Any]], columns: Sequence[str], formats: dict[str, str], cut: Sequence[str] = ()
) -> str:
    """``rows`` as a table of ``columns``, numbers by ``formats``; a text of a ``cut`` column longer than
    ``_CUT`` characters is cut, whole on hover."""

    def td(column: str, v: Any) -> str:
        text = "–" if v is None else format(v, formats.get(column, ""))
        if isinstance(v, int | float):
            return f'<td class="num">{escape_html(text)}</td>'
        if column in cut and len(text) > _CUT:
            return f'<td class="cut" title="{escape_html(text)}">{escape_html(text[: _CUT - 1] + "…")}</td>'
        return f"<td>{escape_html(text)}</td>"

    head = "".join(f"<th>{escape_html(c)}</th>" for c in columns)
    body = "".join(f"<tr>{''.join(td(c, r.get(c)) for c in columns)}</tr>" for r in rows)
    # A table wider than the screen scrolls in its own box, never the page.
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
padding:0 1rem;color:#222}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2.5rem;border-bottom:1px solid #ddd}
.chart{width:100%;margin:1rem 0;overflow-x:auto}
.wide{overflow-x:auto;margin:.5rem 0 1.5rem}
table{border-collapse:collapse;font-size:.85rem}
th,td{border-bottom:1px solid #eee;padding:.2rem .6rem;text-align:left;vertical-align:top;
overflow-wrap:anywhere}
td.cut{max-width:28rem}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#555;font-size:.85rem}
"""


def _place(
    charts: list[tuple[str, dict[str, Any]]], specs: Iterable[tuple[str, dict[str, Any]]]
) -> list[str]:
    """The place of each chart of ``specs`` on the page; the charts join ``charts`` (embedded at the end)."""
    specs = list(specs)
    charts.extend(specs)
    return [f'<div class="chart" id="{escape_html(chart_id)}"></div>' for chart_id, _ in specs]


def _summary(corpus: Corpus, title: str) -> str:
    """The title and what the page covers: sessions, requests, tokens billed and cost."""
    from ctxtool.frames.query import read_summary, totals

    summary = read_summary(corpus)
    sums = totals(corpus.requests.select("input", "output", "cached", "thoughts", "tool", "total", "cost"))
    cost = sums.get("cost")
    return (
        f"<h1>{escape_html(title)}</h1><p class='note'>{plural(summary['sessions'], 'session')}, "
        f"{plural(summary['requests'], 'request')}, {plural(int(sums.get('total') or 0), 'token')} billed"
        + (f", ${float(cost):,.2f}" if cost is not None else "")
        + ". What fills the context is an estimate: each part of the history is estimated with Gemini "
        "CLI's own estimator and scaled to the prompt tokens recorded for the request; overhead is what the "
        "history does not explain (system prompt, tool declarations, environment).</p>"
    )


def _consumers_table(corpus: Corpus, keys: Sequence[str], top: int, *, redact: bool) -> str:
    """The ``top`` context consumers of each charted session (``keys``), secrets redacted with ``redact``."""
    import polars as pl

    from ctxtool.frames.composition import top_consumers

    charted = corpus.requests.filter(pl.col("session_key").is_in(keys)).get_column("session").unique()
    consumers = top_consumers(corpus, top).filter(pl.col("session").is_in(charted.implode()))
    rows: Iterable[dict[str, Any]] = consumers.iter_rows(named=True)
    if redact:
        from ctxtool.common.secret_scan import redact as redact_text

        rows = ({**r, "target": r["target"] and redact_text(r["target"])} for r in rows)
    columns = ["session", "rank", "item", "tool", "target", "count", "tokens", "share"]
    table = _table(rows, columns, {"tokens": ",", "share": ".1%"}, cut=["target"])
    return f"<h2>Top context consumers (at the last request of each, {top} per session)</h2>" + table


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
    charts: list[tuple[str, dict[str, Any]]] = []
    sections = [_summary(corpus, title), "<h2>Spend over time</h2>", *_place(charts, spend_charts(corpus))]
    keys = largest_sessions(corpus, sessions)
    largest = "the largest session" if len(keys) == 1 else f"the {len(keys)} largest sessions"
    sections.append(
        f"<h2>Context per request ({largest})</h2>"
        "<p class='note'>Stacked by what fills it; the dashed line is Gemini CLI's compression threshold. "
        "Compressions, rewinds, rollbacks and model switches are marked.</p>"
    )
    sections += _place(charts, (session_chart(corpus, key) for key in keys))
    sections.append(_consumers_table(corpus, keys, top, redact=redact))
    if compare_rows:
        sections.append("<h2>Compaction strategies side by side</h2>")
        sections += _place(charts, compare_charts(compare_rows))
        # The compare rows as a table: per session and strategy, its status, tokens and fact retention.
        rows = ({**r, "session": str(r.get("session", "")).rsplit("/", 1)[-1]} for r in compare_rows)
        columns = ["session", "strategy", "status", "tokens_before", "tokens_after", "retention"]
        numbers = {"tokens_before": ",", "tokens_after": ",", "retention": ".1f"}
        sections.append(_table(rows, columns, numbers))
    runtime = chart_runtime()
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
