"""The only module that imports rich: tables, colours and numbers for people.

The terminal decides colour and width, never structure: a table shows the same rows and columns as the
machine formats, with readable numbers, a totals row and the context share coloured against Gemini CLI's
compression threshold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import IO, Any

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ctxtool.tokens import COMPRESSION_THRESHOLD

_RIGHT = {
    "requests",
    "sessions",
    "turn",
    "turns",
    "input",
    "output",
    "cached",
    "thoughts",
    "tool",
    "total",
    "context",
    "peak_context",
    "context_limit",
    "context_share",
    "cache_ratio",
    "tool_calls",
    "tool_errors",
    "compressions",
    "rewinds",
    "subagents",
    "cost",
    "duration_s",
}
_HEADERS = {
    "requests": "req",
    "context_share": "ctx %",
    "cache_ratio": "cache %",
    "peak_context": "peak ctx",
    "context_limit": "limit",
    "duration_s": "time",
    "tool_calls": "tools",
    "tool_errors": "tool err",
    "compressions": "compr.",
    "cost": "cost $",
}
# What a table shows per report; machine formats always carry every column.
TABLE_COLUMNS: dict[str, list[str]] = {
    "turn": [
        "session",
        "turn",
        "prompt",
        "start",
        "duration_s",
        "requests",
        "input",
        "output",
        "thoughts",
        "cached",
        "peak_context",
        "context_share",
        "cache_ratio",
        "tool_calls",
        "compressed",
        "cost",
    ],
    "request": [
        "session",
        "turn",
        "timestamp",
        "model",
        "input",
        "output",
        "thoughts",
        "cached",
        "context_share",
        "cache_ratio",
        "tool_calls",
        "live",
        "cost",
    ],
    "session": [
        "session",
        "project",
        "start",
        "turns",
        "requests",
        "input",
        "output",
        "thoughts",
        "total",
        "peak_context",
        "context_share",
        "cache_ratio",
        "compressions",
        "cost",
    ],
    "model": [
        "model",
        "sessions",
        "requests",
        "input",
        "output",
        "thoughts",
        "cached",
        "total",
        "cache_ratio",
        "cost",
    ],
    "project": [
        "project",
        "sessions",
        "requests",
        "input",
        "output",
        "thoughts",
        "total",
        "cache_ratio",
        "cost",
    ],
    "day": ["day", "sessions", "requests", "input", "output", "thoughts", "total", "cache_ratio", "cost"],
}
_MAX_WIDTH = {"prompt": 40, "session": 34, "project": 24, "model": 30}


def make_console(
    stream: IO[str] | None = None, *, width: int | None = None, color: bool | None = None
) -> Console:
    return Console(
        file=stream,
        width=width,
        no_color=color is False,
        force_terminal=True if color else None,
        highlight=False,
        soft_wrap=False,
    )


def human_int(value: Any) -> str:
    if value is None:
        return "–"
    n = int(value)
    if abs(n) < 100_000:
        return f"{n:,}"
    if abs(n) < 10_000_000:
        return f"{n / 1_000:,.0f}k"
    return f"{n / 1_000_000:,.1f}M"


def percent(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{float(value) * 100:.1f}%"


def money(value: Any) -> str:
    if value is None:
        return "?"
    v = float(value)
    return f"{v:,.2f}" if v >= 1 else f"{v:.4f}"


def duration(value: Any) -> str:
    if value is None:
        return "–"
    s = float(value)
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{s // 60:.0f}m{s % 60:02.0f}s"
    return f"{s // 3600:.0f}h{(s % 3600) // 60:02.0f}m"


def share_style(share: float | None) -> str:
    """Green well below the threshold, yellow approaching it, red at or past it (compression would fire)."""
    if share is None:
        return ""
    if share >= COMPRESSION_THRESHOLD:
        return "bold red"
    if share >= COMPRESSION_THRESHOLD * 0.8:
        return "yellow"
    return "green"


def cell(column: str, value: Any) -> Text:
    if column == "context_share":
        return Text(percent(value), style=share_style(value))
    if column == "cache_ratio":
        return Text(percent(value))
    if column == "cost":
        return Text(money(value), style="" if value is not None else "dim")
    if column == "duration_s":
        return Text(duration(value))
    if isinstance(value, bool):
        if column == "compressed":
            return Text("yes" if value else "", style="magenta")
        return Text("yes" if value else "no", style="" if value else "dim")
    if isinstance(value, int) and column in _RIGHT:
        return Text(human_int(value))
    if isinstance(value, datetime):
        return Text(value.strftime("%Y-%m-%d %H:%M"))
    if column == "timestamp" and isinstance(value, str):
        return Text(value[:19].replace("T", " "))
    if isinstance(value, date):
        return Text(value.isoformat())
    if value is None:
        return Text("–", style="dim")
    text = str(value)
    if column == "session" and text.startswith("session-"):
        text = text.removeprefix("session-")
    return Text(text, no_wrap=True, overflow="ellipsis")


def stats_table(
    rows: pl.DataFrame,
    totals: Mapping[str, Any],
    *,
    by: str,
    title: str,
    caption: str | None = None,
    single_session: bool = False,
    width: int = 120,
) -> Table:
    wanted = TABLE_COLUMNS.get(by, rows.columns)
    columns = [
        c for c in wanted if c in rows.columns and not (single_session and c == "session" and by != "session")
    ]
    columns = _fit(rows, columns, totals, width)
    table = Table(
        title=title, title_justify="left", caption=caption, caption_justify="left", show_footer=True
    )
    unpriced = rows.get_column("unpriced").to_list() if "unpriced" in rows.columns else [0] * rows.height
    body = [
        [_partial(cell(col, v), col, missing) for col, v in zip(columns, row, strict=True)]
        for row, missing in zip(rows.select(columns).iter_rows(), unpriced, strict=True)
    ]
    footers: list[Text] = []
    for i, col in enumerate(columns):
        if i == 0:
            footers.append(Text("total", style="bold"))
        else:
            footer = cell(col, totals[col]) if col in totals else Text("")
            footers.append(_partial(footer, col, totals.get("unpriced", 0)))
    for i, col in enumerate(columns):
        header = _HEADERS.get(col, col)
        shrinkable = col in _MAX_WIDTH
        # Numbers are never cut: their column is as wide as the widest value; text columns give way.
        widest = max([len(header), footers[i].cell_len, *(r[i].cell_len for r in body)])
        table.add_column(
            header,
            justify="right" if col in _RIGHT else "left",
            footer=footers[i],
            overflow="ellipsis",
            # Rich only narrows wrappable columns; each text cell itself is no_wrap (ellipsis instead).
            no_wrap=not shrinkable,
            max_width=_MAX_WIDTH.get(col),
            min_width=None if shrinkable else widest,
        )
    for r in body:
        table.add_row(*r)
    return table


def _partial(text: Text, column: str, unpriced: int | None) -> Text:
    """A cost that leaves out requests of unknown price ends with ``+``: it is at least that much."""
    if column == "cost" and unpriced and text.plain != "?":
        return Text(text.plain + "+", style=text.style)
    return text


def unpriced_note(unpriced: int) -> str | None:
    """The caption line that explains a ``+`` after a cost."""
    if not unpriced:
        return None
    return f"cost+: leaves out {unpriced:,} request(s) whose model has no known price (see the warning)."


def hidden_note(requests: int, cost: float) -> str | None:
    """The caption line for Gemini CLI's unrecorded compression calls (an estimate, never in the totals)."""
    if not requests:
        return None
    return (
        f"Not in the totals: Gemini CLI's compression calls, which it does not record: {requests:,} "
        f"request(s), estimated ${money(cost)}."
    )


# When a terminal is too narrow, these go first (machine formats still carry them).
_DROP_ORDER = (
    "tool",
    "cached",
    "thoughts",
    "compressions",
    "compressed",
    "tool_calls",
    "live",
    "duration_s",
    "start",
    "timestamp",
    "cache_ratio",
    "sessions",
    "turns",
    "peak_context",
    "output",
    "project",
    "model",
)
_TEXT_MIN = {"prompt": 16, "session": 14, "project": 12, "model": 14}


def _fit(rows: pl.DataFrame, columns: list[str], totals: Mapping[str, Any], width: int) -> list[str]:
    def need(cols: list[str]) -> int:
        total = 1
        for col in cols:
            if col in _TEXT_MIN:
                w = _TEXT_MIN[col]
            else:
                values = rows.get_column(col).to_list()
                w = max(
                    [len(_HEADERS.get(col, col)), cell(col, totals.get(col)).cell_len]
                    + [cell(col, v).cell_len for v in values]
                )
            total += w + 3
        return total

    cols = list(columns)
    for victim in _DROP_ORDER:
        if need(cols) <= width:
            break
        if victim in cols:
            cols.remove(victim)
    return cols


def print_table(console: Console, table: Table) -> None:
    console.print(table)


# --- ctxtool audit ----------------------------------------------------------------------------------

_STATUS_STYLE = {
    "fail": "bold red",
    "skip": "dim",
    "pass": "green",
    "removed": "red",
    "added": "green",
    "changed": "yellow",
    "kept": "dim",
}


def audit_table(
    checks: Sequence[Mapping[str, Any]], *, title: str, caption: str | None = None, width: int = 120
) -> Table:
    """One row per check: status, subject (session or day), rule, value, limit and the worst offender.

    ``checks`` rows carry ``status``, ``subject``, ``rule``, ``value`` and ``limit`` already formatted as
    text, and ``offender``."""
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left", width=None)
    table.add_column("status", no_wrap=True)
    # Rich narrows only wrappable columns; the cells themselves are no_wrap, so they end in an ellipsis.
    table.add_column("session / day", overflow="ellipsis", no_wrap=False, max_width=36)
    table.add_column("rule", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("limit", justify="right", no_wrap=True)
    table.add_column("worst", overflow="ellipsis", no_wrap=False, min_width=min(12, width // 8))
    for c in checks:
        status = str(c["status"])
        table.add_row(
            Text(status.upper(), style=_STATUS_STYLE.get(status, "")),
            Text(str(c["subject"]).removeprefix("session-"), overflow="ellipsis", no_wrap=True),
            Text(str(c["rule"])),
            Text(str(c["value"])),
            Text(str(c["limit"])),
            Text(str(c.get("offender") or ""), overflow="ellipsis", no_wrap=True),
        )
    return table


# --- ctxtool diff -----------------------------------------------------------------------------------


def diff_summary_table(rows: Sequence[Sequence[str]], *, title: str, headers: Sequence[str]) -> Table:
    """A small table of preformatted cells: the first column left-aligned, the others right-aligned."""
    table = Table(title=title, title_justify="left")
    for i, name in enumerate(headers):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def diff_message_table(rows: Sequence[Mapping[str, Any]], *, title: str, width: int = 120) -> Table:
    """One row per message: status, before/after position, type, estimated tokens and an elided preview."""
    table = Table(title=title, title_justify="left")
    table.add_column("status", no_wrap=True)
    table.add_column("#b", justify="right", no_wrap=True)
    table.add_column("#a", justify="right", no_wrap=True)
    table.add_column("type", no_wrap=True)
    table.add_column("est.", justify="right", no_wrap=True)
    table.add_column("content", overflow="ellipsis", no_wrap=False, min_width=min(20, width // 4))
    for r in rows:
        status = str(r["status"])
        table.add_row(
            Text(status, style=_STATUS_STYLE.get(status, "")),
            Text("" if r["before_index"] is None else str(r["before_index"])),
            Text("" if r["after_index"] is None else str(r["after_index"])),
            Text(str(r["type"])),
            Text(str(r["estimate"])),
            Text(str(r["content"]), overflow="ellipsis", no_wrap=True),
        )
    return table


_COMPACT_STATUS_STYLE = {
    "COMPRESSED": "green",
    "CONTENT_TRUNCATED": "cyan",
    "NOOP": "dim",
    "FAILED": "bold red",
}


def compact_table(
    reports: Sequence[Mapping[str, Any]], *, title: str = "ctxtool compact", plan: bool = False
) -> Table:
    """One row per session of ``ctxtool compact``: status, tokens before → after, messages summarised /
    kept, fact retention (user requests, paths, commands, errors, directives: kept verbatim) and where the
    result went. ``plan`` (a dry
    run) adds the threshold, the split turn and the number of tool outputs the budget would cut."""
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    rows: list[tuple[Any, ...]] = []
    for r in reports:
        name = str(r.get("input_path", "")).rsplit("/", 1)[-1]
        status = str(r.get("status"))
        before, after = r.get("tokens_before"), r.get("tokens_after")
        tokens = "–" if before is None else f"{human_int(before)} → {human_int(after)}"
        summarised, kept = r.get("messages_summarised"), r.get("messages_kept")
        msgs = "–" if summarised is None else f"{summarised}/{kept}"
        retention = r.get("retention") or {}
        kinds = ("requests", "paths", "commands", "errors", "directives")
        facts = "/".join(_retention_cell(retention.get(k)) for k in kinds)
        if not retention:
            facts = "–"
        if r.get("error"):
            where = str(r["error"])
        elif r.get("output_path"):
            where = ("would write " if r.get("dry_run") else "") + _short_path(str(r["output_path"]))
        else:
            where = f"nothing written: {r['reason']}" if r.get("reason") else "nothing written"
        styled = Text(status, style=_COMPACT_STATUS_STYLE.get(status, "yellow"))
        extra: list[str] = []
        if plan:
            limit, share = r.get("token_limit"), r.get("threshold")
            extra = [
                "–" if limit is None or share is None else human_int(int(share * limit)),
                "–" if r.get("split_index") is None else str(r["split_index"]),
                str(len(r.get("tool_outputs_truncated") or [])),
            ]
        rows.append((name, styled, tokens, msgs, facts, *extra, where))
    headers = ["status", "tokens", "msgs sum/kept", "kept facts r/p/c/e/d"]
    if plan:
        headers += ["threshold", "split", "cut outputs"]
    # The short columns are never cut (a status or a count with an ellipsis is useless); session and
    # output give way on a narrow terminal.
    table.add_column("session", overflow="ellipsis", max_width=40, min_width=12)
    for i, header in enumerate(headers, 1):
        widest = max([len(header), *(Text(str(row[i])).cell_len for row in rows)])
        table.add_column(header, justify="left" if i == 1 else "right", no_wrap=True, min_width=widest)
    table.add_column("output", overflow="fold", min_width=16)
    for row in rows:
        table.add_row(*row)
    return table


def _short_path(path: str) -> str:
    from pathlib import Path

    p = Path(path)
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return path


def _retention_cell(kind: Any) -> str:
    if not isinstance(kind, Mapping) or not kind.get("total"):
        return "–"
    return f"{100 * int(kind['kept']) // int(kind['total'])}%"


def compare_table(rows: Sequence[Mapping[str, Any]], *, title: str = "ctxtool compare") -> Table:
    """One row per session and strategy of ``ctxtool compare``: trigger, tokens before → after, reduction,
    messages kept, fact retention per kind and the time taken."""
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("session", no_wrap=True, overflow="ellipsis", max_width=28)
    table.add_column("strategy", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("trigger", justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("cut", justify="right", no_wrap=True)
    table.add_column("kept", justify="right", no_wrap=True)
    table.add_column("facts r/p/c/e/d", justify="right", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    for r in rows:
        name = str(r.get("session", "")).rsplit("/", 1)[-1]
        status = str(r.get("status"))
        trig = r.get("would_trigger")
        trigger = "n/a" if trig is None else f"turn {r.get('trigger_turn')}" if trig else "no"
        before, after = r.get("tokens_before"), r.get("tokens_after")
        tokens = "–" if before is None or after is None else f"{human_int(before)} → {human_int(after)}"
        reduction = r.get("reduction")
        cut = "–" if reduction is None else f"{100 * float(reduction):.0f}%"
        kept = "–" if r.get("messages_kept") is None else str(r["messages_kept"])
        facts = "/".join(
            "–" if r.get(f"{k}_retention") is None else f"{float(r[f'{k}_retention']):.0f}%"
            for k in ("requests", "paths", "commands", "errors", "directives")
        )
        seconds = r.get("seconds")
        took = "–" if seconds is None else f"{float(seconds):.2f}s"
        styled = Text(status, style=_COMPACT_STATUS_STYLE.get(status, "yellow"))
        table.add_row(name, str(r.get("strategy")), styled, trigger, tokens, cut, kept, facts, took)
    return table


def compare_bars(means: Sequence[Mapping[str, Any]], *, width: int = 40) -> Table:
    """A bar chart in the terminal: mean tokens after (share of before) and mean retention per strategy."""
    table = Table(title="per strategy (mean over sessions)", title_justify="left", show_edge=False, box=None)
    table.add_column("strategy", no_wrap=True)
    table.add_column("tokens after / before", no_wrap=True)
    table.add_column("fact retention", no_wrap=True)
    for m in means:
        before = float(m.get("tokens_before") or 0)
        after = float(m.get("tokens_after") or 0)
        share = min(1.0, after / before) if before else 0.0
        ret = m.get("retention")
        ret_share = 0.0 if ret is None else float(ret) / 100
        tokens = Text("█" * round(share * width), style="cyan")
        tokens.append(f" {human_int(round(after))} / {human_int(round(before))}")
        bar = Text("█" * round(ret_share * width), style="green")
        bar.append(" –" if ret is None else f" {float(ret):.0f}%")
        table.add_row(str(m.get("strategy")), tokens, bar)
    return table
