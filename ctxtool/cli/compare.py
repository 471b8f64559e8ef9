"""``ctxtool compare``: run several compaction strategies on the same sessions and compare them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from ctxtool.cli import compaction, options
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import UsageError

HELP = """Run compaction strategies side by side on the same sessions and compare what they keep.

Each SESSION is compacted by every strategy of --strategies (`ctxtool compact --list-profiles` lists them),
always forced, into a temporary folder (or --keep DIR) and read back. Per session and strategy: whether its
own trigger would have fired and in which turn, tokens before and after (Gemini CLI's estimate), messages
kept, retention of the history's facts (paths, commands, errors, directives) and the time taken.

Examples:

\b
  ctxtool compare ~/.gemini/tmp/myproj/chats/
  ctxtool compare SESSION.jsonl --strategies gemini-cli,pi -o compare.csv
  ctxtool compare SESSION.jsonl --chart strategies.png

Exit status: 0 compared (whatever the outcomes), 1 a session could not be read or compacted, 2 usage error.
"""


FORMATS = ("table", "json", "csv")
STRATEGIES = typer.Option(
    "gemini-cli,kode,pi,openclaw,codex",
    "--strategies",
    metavar="NAMES",
    show_default=False,
    help="Comma-separated (default: gemini-cli,kode,...).",
)
SUMMARIZER_MODEL = typer.Option(
    None, "--summarizer-model", metavar="MODEL", help="gemini summarizer's model."
)
CONTEXT_WINDOW = typer.Option(
    None, "--context-window", min=1000, metavar="TOKENS", help="Every strategy's window (default: model's)."
)
KEEP = typer.Option(None, "--keep", metavar="DIR", help="Keep the results under DIR/<strategy>/.")
CHART = typer.Option(None, "--chart", metavar="FILE", help="Also draw a chart (.png or .svg).")
BARS = typer.Option(True, "--bars/--no-bars", show_default=False, help="Bar chart under the table (default).")
FORMAT = typer.Option(None, "--format", "-f", metavar="FORMAT", help="table, json or csv (default: suffix).")
OUTPUT = typer.Option(None, "--output", "-o", metavar="FILE", help="Write to FILE, not standard output.")


def compare(
    paths: list[str] = options.SESSION_PATHS,
    strategies: str = STRATEGIES,
    summarizer: str = options.SUMMARIZER,
    model: str = SUMMARIZER_MODEL,
    base_url: str = options.BASE_URL,
    context_window: int = CONTEXT_WINDOW,
    keep: Path = KEEP,
    chart: Path = CHART,
    bars: bool = BARS,
    fmt: str = FORMAT,
    output_path: Path = OUTPUT,
    show_secrets: bool = options.SHOW_SECRETS,
    color: options.Color = options.COLOR,
    width: int = options.WIDTH,
    wide: bool = options.WIDE,
    since: str = options.SINCE,
    until: str = options.UNTIL,
    project: list[str] = options.PROJECT,
    session: list[str] = options.SESSION,
    only_model: list[str] = options.MODEL,
) -> int:
    from ctxtool import compare as lib
    from ctxtool.common.choices import output_format

    fmt = output_format(fmt, output_path, FORMATS)
    compaction.check_summarizer(summarizer)
    compaction.check_summarizer_model(summarizer, model)
    filters = options.filter_args(since, until, project, session, only_model)
    if chart is not None and chart.suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"chart file {chart} is neither .png nor .svg", "Name the chart file *.png or *.svg")
    names = lib.parse_strategies(strategies)
    summ = compaction.make_summarizer(summarizer, model, base_url)
    found, sources = compaction.session_files(paths, filters)
    if not sources and not found.missing:
        return ExitStatus.ERROR  # each refused entry was named above, with its fix
    from ctxtool.session.discover import matches_nothing

    for missing in found.missing:
        print(f"Error: {matches_nothing(missing)}", file=sys.stderr)
    with compaction.batch(summ, len(sources), "comparing") as advance:
        rows = lib.compare_sessions(
            sources, names, summ, context_window=context_window, keep_dir=keep, advance=advance
        )
    if not show_secrets:  # notes and errors quote session text
        from ctxtool.common.secret_scan import redact_value

        rows = redact_value(rows)
    for row in rows:
        if row.get("error"):
            print(f"Error: {row['session']} ({row['strategy']}): {row['error']}", file=sys.stderr)
    if chart is not None:
        lib.write_chart(rows, chart)
        print(f"chart written to {chart}", file=sys.stderr)
    if not rows or all(r.get("status") == "FAILED" for r in rows):
        return ExitStatus.ERROR  # nothing was compared: the errors above say why; stdout stays empty
    if fmt == "table":  # the table, its notes, and the bar chart of each strategy's means under it (--bars)
        from ctxtool.render import tables as render

        with render.output_console(output_path, width=width, color=color) as console:
            table, notes = render.compare_table(rows, width=console.width, wide=wide)
            render.print_table(console, table, wide=wide)
            for note in notes:
                console.print(note, markup=False, highlight=False)
            if bars:
                console.print()
                means = lib.strategy_means(rows)
                render.print_table(console, render.compare_bars(means, width=console.width))
    else:
        _write_rows(rows, names, fmt, output_path)
    if output_path is not None:
        options.say_written(output_path)
    failed = bool(found.missing) or any(r.get("status") == "FAILED" for r in rows)
    return ExitStatus.ERROR if failed else ExitStatus.OK


def _write_rows(rows: list[dict[str, Any]], names: list[str], fmt: str, output_path: Path | None) -> None:
    """The rows as json or csv, to --output or stdout."""
    import polars as pl

    from ctxtool import compare as lib
    from ctxtool.render import formats as output

    frame = pl.DataFrame(rows, schema={c: _dtype(c) for c in lib.COLUMNS})
    output.write_output(output.encode(frame, fmt, command="compare", strategies=names), output_path)


# The integer columns, besides every *_kept and *_total count.
_INTS: tuple[str, ...] = ("trigger_turn", "trigger_limit", "trigger_tokens", "tokens_before", "tokens_after")
_INTS += ("messages_before", "messages_after", "messages_summarised", "own_tokens_before", "own_tokens_after")


def _dtype(column: str) -> Any:
    import polars as pl

    if column in _INTS or column.endswith(("_kept", "_total")):
        return pl.Int64
    if column in ("reduction", "retention", "seconds") or column.endswith("_retention"):
        return pl.Float64
    return pl.Boolean if column == "would_trigger" else pl.Utf8
