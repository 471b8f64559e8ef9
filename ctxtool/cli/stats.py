"""``ctxtool stats``: token usage per turn, request, session, model, project or day."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import typer

from ctxtool.cli import options
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import UsageError, use_one_of
from ctxtool.common.wording import plural

HELP = """Report token usage, context-window share, cache hits and cost of Gemini CLI sessions.

PATHS are session files, directories or globs; with none, the Gemini CLI data root is scanned
($GEMINI_CLI_HOME/.gemini/tmp if set, else ~/.gemini/tmp). A PATH may instead be one dataset directory
written by `ctxtool export`. Token sums count every request ever billed
(including requests later removed by a rewind or a checkpoint); --live keeps only the history Gemini CLI
would resume.

Token columns, as ccusage counts them: input (prompt tokens not served from the cache), cached, output,
thoughts and tool add up to total; prompt_tokens (JSON, CSV, --wide) is the whole prompt, input + cached.

What fills the context (the ctx_overhead, ctx_prompts, ctx_model and ctx_tool_io columns of --by
request, summed for --by turn and session, and --top) are estimates: each part of the history sent
with a request is estimated with Gemini CLI's own estimator (4 characters a token), then scaled so
that the parts add up to the prompt tokens recorded for the request; overhead is what the history
does not explain (system prompt, tool declarations, environment), the same for every request of a
session. The event column of --by request marks compressions, rewinds, rollbacks and model switches.

Examples:

\b
  ctxtool stats                                  # every session, one row each
  ctxtool stats --by week --timezone Europe/Paris --sort cost --desc --limit 5
  ctxtool stats --session c4e5f6a7 --top 5       # the 5 largest items in its context

Exit status: 0 ok; 1 a PATH matched no session (an error, on stderr), or with --strict a file
could not be read in full; 2 usage error.
"""


class _DelayedProgress:
    """A progress bar on stderr that appears only once a scan has taken longer than a second."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.start = time.monotonic()
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if time.monotonic() - self.start < 1.0 or done >= total:
                return
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("reading sessions"),
                BarColumn(),
                DownloadColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("read", total=total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def stats(
    paths: list[str] = typer.Argument(
        None, help="Session files, directories or globs (default: the data root)."
    ),
    by: str = typer.Option(
        None,
        "--by",
        "-b",
        help="Rows: turn, request, session, model, project, day, week (by its Monday) or month "
        "(default: turn for one session, else session).",
    ),
    fmt: str = typer.Option(
        None,
        "--format",
        "-f",
        help="table, json, jsonl, csv or parquet (default: --output's suffix, else table).",
    ),
    output: Path = typer.Option(None, "--output", "-o", help="Write to FILE instead of standard output."),
    timezone: str = options.TIMEZONE,
    since: str = options.SINCE,
    until: str = options.UNTIL,
    project: list[str] = options.PROJECT,
    session: list[str] = options.SESSION,
    model: list[str] = options.MODEL,
    sort: str = typer.Option(None, "--sort", help="Sort rows by COLUMN (any column of the report)."),
    desc: bool = typer.Option(False, "--desc", help="With --sort: largest first."),
    limit: int = typer.Option(None, "--limit", "-n", min=1, help="Show at most N rows (after sorting)."),
    top: int = typer.Option(
        None,
        "--top",
        min=1,
        help="Instead of --by: the N largest items in context at each session's last request (tool outputs "
        "by tool and file or command, prompts, model turns, overhead), estimated tokens and share.",
    ),
    live: bool = typer.Option(
        False,
        "--live",
        help="Count only requests still in the live history (not rewound or checkpointed away).",
    ),
    subagents: bool = typer.Option(
        True,
        "--subagents/--no-subagents",
        help="Include subagent sessions (chats/<parent-id>/*.json[l], and flat files of kind subagent); "
        "their tokens and turns roll up into the parent.",
    ),
    strict: bool = options.STRICT,
    no_cache: bool = options.NO_CACHE,
    cache_dir: Path = options.CACHE_DIR,
    show_secrets: bool = options.SHOW_SECRETS,
    color: options.Color = options.COLOR,
    width: int = options.WIDTH,
    wide: bool = options.WIDE,
) -> int:
    from ctxtool.common.choices import BY_CHOICES, FORMATS

    if by is not None and by not in BY_CHOICES:
        raise UsageError(f"--by {by!r} is not a report", use_one_of(by, BY_CHOICES))
    from ctxtool.common.choices import output_format

    fmt = output_format(fmt, output, FORMATS)
    if fmt == "parquet" and output is None and sys.stdout.isatty():
        raise UsageError("parquet is binary and stdout is a terminal", "Pass --output FILE.parquet")
    options.check_timezone(timezone)
    filters = options.filter_args(since, until, project, session, model)

    from ctxtool import export
    from ctxtool.frames.loading import CacheUse, load_corpus

    datasets = [p for p in paths or () if export.is_dataset(p)]
    if datasets and len(paths) > 1:
        raise UsageError(
            "a ctxtool dataset cannot be combined with other paths",
            f"Pass {datasets[0]} alone, or export the sessions into it first (ctxtool export PATH --to DIR)",
        )
    if datasets:
        corpus = export.load_dataset(datasets[0], subagents=subagents)
        cache_use = CacheUse()
    else:
        progress = _DelayedProgress(options.progress_wanted())
        try:
            corpus, cache_use = load_corpus(
                paths or [], subagents=subagents, cache=not no_cache, cache_dir=cache_dir, progress=progress
            )
        finally:
            progress.close()
        if cache_use.notice:
            print(f"notice: {cache_use.notice}", file=sys.stderr)
        from ctxtool.frames import replay
        from ctxtool.session.discover import default_roots

        targets = [str(p) for p in paths or ()] or [str(root) for root in default_roots()]
        replay.loaded(targets, subagents, warm=cache_use.corpus_hit and not cache_use.notice)
    from ctxtool import frames
    from ctxtool.render import formats as out

    sessions_read = corpus.sessions.height
    corpus = frames.filter_corpus(corpus, **filters)
    if live:
        corpus = frames.live_only(corpus)

    for warning in frames.read_warnings(corpus):
        _warn(warning)

    roots = corpus.sessions.filter(corpus.sessions["parent_session_key"].is_null()).height
    if top is not None:
        if by is not None:
            raise UsageError("--top and --by are two reports", "Pass one of them")
        return _top_report(corpus, top, fmt, output, show_secrets, color, width, wide)
    by = by or ("turn" if roots == 1 else "session")
    rows = frames.with_uncached_input(
        frames.report(corpus, by, include_subagents_in_parent=subagents, timezone=timezone)
    )
    if not show_secrets and "prompt" in rows.columns:
        import polars as pl

        from ctxtool.common.secret_scan import redact

        prompts = [None if text is None else redact(text) for text in rows.get_column("prompt").to_list()]
        rows = rows.with_columns(pl.Series("prompt", prompts, dtype=pl.String))
    if sort:
        if sort not in rows.columns:
            raise UsageError(f"--sort {sort!r} is not a column of --by {by}", use_one_of(sort, rows.columns))
        rows = rows.sort(sort, descending=desc, nulls_last=True)
    all_rows = rows
    if limit:
        rows = rows.head(limit)

    summary = frames.read_summary(corpus)
    summary["index"] = {
        "enabled": cache_use.enabled,
        "corpus_from_cache": cache_use.corpus_hit,
        "files_from_index": cache_use.files_cached,
        "files_resumed": cache_use.files_resumed,
        "files_parsed": cache_use.files_parsed,
    }
    if fmt == "table" and rows.height == 0:
        given = [
            *([f"--since {since}"] if since else []),
            *([f"--until {until}"] if until else []),
            *(f"--project {p}" for p in project or []),
            *(f"--session {s}" for s in session or []),
            *(f"--model {m}" for m in model or []),
        ]
        why = (
            f" {plural(sessions_read, 'session')} {'was' if sessions_read == 1 else 'were'} read, but nothing"
            f" matches {' '.join(given)}: loosen or drop {'it' if len(given) == 1 else 'them'}."
            if given and sessions_read
            else ""
        )
        print(f"{frames.describe_read(summary)} Nothing to report.{why}", file=sys.stderr)
    elif fmt == "table":
        from ctxtool.render import tables as render

        console = render.make_console(
            open(output, "w", encoding="utf-8") if output else None,  # noqa: SIM115
            width=width,
            color=color,
        )
        title = f"ctxtool stats --by {by}" + (" (live history only)" if live else "")
        if rows.height < all_rows.height:
            title += f": top {rows.height:,} of {all_rows.height:,} rows (totals of all {all_rows.height:,})"
        sums = _totals(all_rows, corpus)  # the totals row is of everything, whatever --limit shows
        notes = [
            frames.describe_read(summary),
            render.unpriced_note(int(sums.get("unpriced") or 0)),
            render.hidden_note(*frames.hidden_calls(corpus)),
        ]
        table = render.stats_table(
            rows,
            sums,
            by=by,
            title=title,
            caption="\n".join(n for n in notes if n),
            single_session=roots == 1,
            width=console.width,
            wide=wide,
        )
        render.print_table(console, table, wide=wide)
        if output:
            console.file.close()
    else:
        envelope: dict[str, Any] = {
            "command": "stats",
            "by": by,
            "view": "live" if live else "billed",
            "read": summary,
        }
        if fmt == "json":
            envelope["totals"] = _totals(all_rows, corpus)
        data = out.encode(rows, fmt, **envelope, **_limit_envelope(rows, all_rows))
        if output:
            out.atomic_write(output, data)
        else:
            out.write_stdout(data, sys.stdout.buffer)

    unmatched = _unmatched(paths or [])
    for path in unmatched:
        print(f"Error: {path}: matches no session file. Check the path, or quote a glob", file=sys.stderr)
    if paths and sessions_read == 0 and not unmatched:
        print(
            f"Error: no session in {' '.join(paths)}. Pass session files or a chats/ folder", file=sys.stderr
        )
    if unmatched or (paths and sessions_read == 0):
        return ExitStatus.ERROR  # an explicit PATH that names nothing is a mistake, not an empty report
    if paths and frames.problem_counts(corpus.problems)["no_sessions"]:
        return ExitStatus.ERROR  # so is a folder given explicitly that holds no session (warned above)
    failed = bool(corpus.problems) or corpus.broken_lines > 0
    from ctxtool.session.discover import refused_paths

    if refused_paths(paths or []):
        return ExitStatus.ERROR  # a PATH given explicitly could not be read (named in a warning above)
    return ExitStatus.ERROR if strict and failed else ExitStatus.OK


def _totals(rows: Any, corpus: Any) -> dict[str, Any]:
    """The totals of every row (whatever --limit shows); ``sessions`` counts each session once."""
    from ctxtool.frames.query import totals

    sums = totals(rows)
    if "sessions" in sums:
        sums["sessions"] = corpus.requests.get_column("session_key").n_unique()
    return sums


def _limit_envelope(rows: Any, all_rows: Any) -> dict[str, Any]:
    """With --limit, the JSON envelope says how many rows there were in all (``rows_total``)."""
    return {"rows_total": all_rows.height} if rows.height < all_rows.height else {}


def _unmatched(paths: list[str]) -> list[str]:
    """The PATH arguments that name no existing file, directory or glob match."""
    import glob
    import os

    return [
        p
        for p in paths
        if not Path(p).expanduser().exists() and not glob.glob(os.path.expanduser(p), recursive=True)
    ]


def _top_report(
    corpus: Any,
    n: int,
    fmt: str,
    output: Path | None,
    show_secrets: bool,
    color: options.Color,
    width: int | None,
    wide: bool,
) -> int:
    """``stats --top N``: the largest items in each session's context at its last request."""
    import polars as pl

    from ctxtool.frames.composition import top_consumers
    from ctxtool.render import formats as out

    rows = top_consumers(corpus, n)
    if not show_secrets:
        from ctxtool.common.secret_scan import redact

        targets = [None if t is None else redact(t) for t in rows.get_column("target").to_list()]
        rows = rows.with_columns(pl.Series("target", targets, dtype=pl.String))
    if fmt == "table":
        from ctxtool.render import tables as render

        console = render.make_console(
            open(output, "w", encoding="utf-8") if output else None,  # noqa: SIM115
            width=width,
            color=color,
        )
        title = f"ctxtool stats --top {n}: the largest items in context at each session's last request"
        table, notes = render.top_table(rows, title=title, width=console.width, wide=wide)
        render.print_table(console, table, wide=wide)
        for note in notes:
            console.print(note)
        if output:
            console.file.close()
    else:
        data = out.encode(rows, fmt, by="top", top=n, estimate=True)
        if output:
            out.atomic_write(output, data)
        else:
            out.write_stdout(data, sys.stdout.buffer)
    return ExitStatus.OK


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("stats", help=HELP)(stats)
