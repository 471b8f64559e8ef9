"""``ctxtool compare``: run several compaction strategies on the same sessions and compare them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from ctxtool.cli import options
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import UsageError

HELP = """Run compaction strategies side by side on the same sessions and compare what they keep.

Each SESSION (file, directory or glob) is compacted by every strategy of --strategies (see `ctxtool
compact --help` for the list and what an offline replay of each cannot reproduce), always forced, into a
temporary directory (or --keep DIR), and each result is read back as a Gemini CLI session. Per session and
strategy: whether the strategy's own trigger would have fired while the session was recorded and in which
user turn, tokens before → after (Gemini CLI's local estimate for every strategy, plus the strategy's own
measure in json/csv), reduction, messages kept, retention of the facts of the whole history (file paths,
shell commands, errors, user directives) and the time taken.

--format table (with a bar chart per strategy), json or csv (one row per session and strategy, with a
`strategy` column); --output PATH writes it to a file. --chart FILE.png|FILE.svg also draws tokens and
retention per strategy with matplotlib.

Examples:

\b
  ctxtool compare ~/.gemini/tmp/myproj/chats/
  ctxtool compare SESSION.jsonl --strategies gemini-cli,pi --output compare.csv
  ctxtool compare SESSION.jsonl --chart strategies.png

Exit status: 0 compared (whatever the outcomes), 1 a session could not be read or compacted, 2 usage error.
"""


def compare(
    paths: list[str] = typer.Argument(
        ..., help="Session files, directories, globs, or session ids (a unique prefix of 4+ characters)."
    ),
    strategies: str = typer.Option(
        "gemini-cli,kode,pi,openclaw,codex", "--strategies", "-s", help="Comma-separated strategy names."
    ),
    summarizer: str = options.SUMMARIZER,
    model: str = typer.Option(None, "--summarizer-model", help="Summarizer model (gemini)."),
    base_url: str = options.BASE_URL,
    context_window: int = typer.Option(
        None,
        "--context-window",
        min=1000,
        help="Context window for every strategy's trigger (default: Kode 200000, others the model's limit).",
    ),
    keep: Path = typer.Option(None, "--keep", help="Keep the compacted sessions under DIR/<strategy>/."),
    chart: Path = typer.Option(None, "--chart", help="Also write a chart to FILE (.png or .svg)."),
    bars: bool = typer.Option(True, "--bars/--no-bars", help="Bar chart under the table (table format)."),
    fmt: str = typer.Option(
        None, "--format", "-f", help="table, json or csv (default: --output's suffix, else table)."
    ),
    output_path: Path = typer.Option(None, "--output", "-o", help="Write json/csv to PATH, not stdout."),
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
    from ctxtool.cli.compact import _LazySummarizer
    from ctxtool.common.choices import output_format
    from ctxtool.compact import is_backup
    from ctxtool.compress.summarizer import Summarizer
    from ctxtool.session.discover import discover

    fmt = output_format(fmt, output_path, ("table", "json", "csv"))
    if summarizer not in ("offline", "gemini"):
        raise UsageError(f"--summarizer {summarizer!r} is not known", "Use offline or gemini")
    if summarizer == "offline" and model:
        raise UsageError(
            "--summarizer-model applies to --summarizer gemini",
            "Add --summarizer gemini, or drop --summarizer-model",
        )
    filters = options.filter_args(since, until, project, session, only_model)
    if chart is not None and chart.suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"chart file {chart} is neither .png nor .svg", "Name the chart file *.png or *.svg")
    names = lib.parse_strategies(strategies)

    summ: Summarizer
    if summarizer == "offline":
        from ctxtool.compress.summarize.offline import OfflineSummarizer

        summ = OfflineSummarizer()
    else:

        def make() -> Summarizer:
            from ctxtool.compress.summarize.gemini_model import GeminiSummarizer

            return GeminiSummarizer(model=model, base_url=base_url)

        summ = _LazySummarizer(make)

    from ctxtool.session.discover import resolve_session_args

    found = discover(resolve_session_args(paths))
    sources = options.filter_sources([sp for sp in found.files if not is_backup(sp.path)], filters)
    for path, _, message in found.unreadable:
        print(f"Error: {path}: {message}", file=sys.stderr)
    if not sources and not found.missing:
        if found.unreadable:
            return ExitStatus.ERROR  # each refused entry was named above, with its fix
        raise UsageError(f"no session files in {', '.join(paths)}", "Pass session files or a chats/ folder")
    for missing in found.missing:
        print(f"Error: {missing}: no such file or directory", file=sys.stderr)
    from ctxtool.cli.compact import _Progress

    progress = _Progress(len(sources), options.progress_wanted(), "comparing")
    try:
        rows = lib.compare_sessions(
            sources, names, summ, context_window=context_window, keep_dir=keep, advance=progress.advance
        )
    finally:
        progress.close()
        if isinstance(summ, _LazySummarizer):
            summ.close()
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
    if fmt == "table":
        from ctxtool.render import tables as render

        console = render.make_console(width=width, color=color)
        table, notes = render.compare_table(rows, width=console.width, wide=wide)
        render.print_table(console, table, wide=wide)
        for note in notes:
            console.print(note, markup=False, highlight=False)
        if bars:
            console.print()
            render.print_table(console, render.compare_bars(lib.strategy_means(rows)))
    else:
        import polars as pl

        from ctxtool.render import formats as output

        frame = pl.DataFrame(rows, schema=_schema(lib.COLUMNS))
        data = output.encode(frame, fmt, command="compare", strategies=names)
        if output_path is not None:
            output.atomic_write(output_path, data)
        else:
            output.write_stdout(data, sys.stdout.buffer)
    failed = bool(found.missing) or any(r.get("status") == "FAILED" for r in rows)
    return ExitStatus.ERROR if failed else ExitStatus.OK


def _schema(columns: tuple[str, ...]) -> dict[str, Any]:
    import polars as pl

    ints = {"trigger_turn", "trigger_limit", "trigger_tokens", "tokens_before", "tokens_after"}
    ints |= {"messages_before", "messages_after", "messages_kept", "messages_summarised"}
    ints |= {"own_tokens_before", "own_tokens_after"}
    ints |= {c for c in columns if c.endswith(("_kept", "_total")) and c not in ("messages_kept",)}
    floats = {"reduction", "retention", "seconds"} | {c for c in columns if c.endswith("_retention")}
    schema: dict[str, Any] = {}
    for c in columns:
        if c in ints:
            schema[c] = pl.Int64
        elif c in floats:
            schema[c] = pl.Float64
        elif c == "would_trigger":
            schema[c] = pl.Boolean
        else:
            schema[c] = pl.Utf8
    return schema


def register(app: typer.Typer) -> None:
    app.command("compare", help=HELP)(compare)
