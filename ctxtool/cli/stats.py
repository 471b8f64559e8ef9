"""``ctxtool stats``: token usage per turn, request, session, model, project or day."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import typer

from ctxtool.cli import options
from ctxtool.cli.status import ExitStatus
from ctxtool.common.choices import BY_CHOICES
from ctxtool.common.errors import UsageError, use_one_of
from ctxtool.common.wording import plural

if TYPE_CHECKING:
    from collections.abc import Callable

    from ctxtool.frames.loading import CacheUse
    from ctxtool.stats import StatsQuery, StatsReport

HELP = """Report token usage, context-window share, cache hits and cost of Gemini CLI sessions.

Each PATH is a session file, folder or glob (default: $GEMINI_CLI_HOME/.gemini/tmp, else ~/.gemini/tmp),
or one dataset folder `ctxtool export` wrote. Sums count every request billed, rewound ones too (--live:
only the history Gemini CLI would resume). input, cached, output, thoughts and tool add up to total, as
ccusage counts them. The ctx_* columns and --top are estimates of what fills the context (docs/tokens.md).

Examples:

\b
  ctxtool stats                                  # every session
  ctxtool stats --by week --sort cost --desc --limit 5
  ctxtool stats --session c4e5f6a7 --top 5       # its largest items

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

            columns = (TextColumn("reading sessions"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
            self.bar = Progress(*columns, console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("read", total=total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


FORMAT = typer.Option(
    None, "--format", "-f", metavar="FORMAT", help="table, json, jsonl, csv, parquet (default: suffix)."
)
OUTPUT = typer.Option(None, "--output", "-o", metavar="FILE", help="Write to FILE, not standard output.")
LIMIT = typer.Option(None, "--limit", "-n", min=1, metavar="N", help="At most N rows, after sorting.")
TOP = typer.Option(None, "--top", min=1, metavar="N", help="The N largest items in each context, not --by.")


class StatsRequest(NamedTuple):  # not a dataclass: `dataclasses` stays out of start-up (--help)
    """One run's options, checked: the PATHS (or the one ``ctxtool export`` dataset among them), the report
    asked for and where it goes. ``given`` are the filters as typed, named when they leave nothing."""

    paths: list[str]
    dataset: str | None
    query: StatsQuery
    fmt: str
    output: Path | None
    given: tuple[str, ...]
    color: options.Color
    width: int | None
    wide: bool


def stats(
    paths: list[str] = options.PATHS,
    by: str = typer.Option(None, "--by", "-b", metavar="ROWS", help=", ".join(BY_CHOICES) + "."),
    fmt: str = FORMAT,
    output: Path = OUTPUT,
    timezone: str = options.TIMEZONE,
    since: str = options.SINCE,
    until: str = options.UNTIL,
    project: list[str] = options.PROJECT,
    session: list[str] = options.SESSION,
    model: list[str] = options.MODEL,
    sort: str = typer.Option(None, "--sort", metavar="COLUMN", help="Sort rows by COLUMN."),
    desc: bool = typer.Option(False, "--desc", help="With --sort: largest first."),
    limit: int = LIMIT,
    top: int = TOP,
    live: bool = typer.Option(False, "--live", help="Only requests in the history a resume sends."),
    subagents: bool = options.SUBAGENTS,
    strict: bool = options.STRICT,
    no_cache: bool = options.NO_CACHE,
    cache_dir: Path = options.CACHE_DIR,
    show_secrets: bool = options.SHOW_SECRETS,
    color: options.Color = options.COLOR,
    width: int = options.WIDTH,
    wide: bool = options.WIDE,
) -> int:
    from ctxtool.common.choices import FORMATS, output_format
    from ctxtool.session.discover import dataset_in
    from ctxtool.stats import StatsQuery

    # Checked in the order the first error is reported: --by, --format, --timezone, the filters, then a
    # dataset among other PATHS.
    if by is not None and by not in BY_CHOICES:
        raise UsageError(f"--by {by!r} is not a report", use_one_of(by, BY_CHOICES))
    fmt = output_format(fmt, output, FORMATS)
    if fmt == "parquet" and output is None and sys.stdout.isatty():
        raise UsageError("parquet is binary and stdout is a terminal", "Pass --output FILE.parquet")
    options.check_timezone(timezone)
    filters = options.filter_args(since, until, project, session, model)
    dataset = dataset_in(paths or [])
    named = [("since", [since] if since else []), ("until", [until] if until else [])]
    named += [("project", project or []), ("session", session or []), ("model", model or [])]
    given = tuple(f"--{flag} {value}" for flag, values in named for value in values)
    query = StatsQuery(by, top, filters, live, subagents, timezone, sort, desc, limit, show_secrets)
    request = StatsRequest(paths or [], dataset, query, fmt, output, given, color, width, wide)
    return _run(request, strict=strict, cache=not no_cache, cache_dir=cache_dir)


def _run(request: StatsRequest, *, strict: bool, cache: bool, cache_dir: Path | None) -> int:
    warnings: list[str] = []
    report, cache_use = _report(request, cache=cache, cache_dir=cache_dir, warn=warnings.append)
    unmatched = _unmatched(request.paths)
    # Only PATHs that name nothing: one line says so (from _exit_status), not a warning, an empty
    # "Read 0 files" caption and then that line.
    only_unmatched = bool(unmatched) and report.sessions_read == 0
    for message in warnings:
        if not (only_unmatched and any(message.startswith(f"{p}: matches no file") for p in unmatched)):
            options.warn(message)
    if report.by == "top":
        _write_top(report, request)
        if request.output is not None:
            options.say_written(request.output)
        return ExitStatus.OK
    from ctxtool.frames import replays
    from ctxtool.frames.loading import CacheUse

    def show(summary: dict[str, Any]) -> None:
        if request.fmt == "table" and report.rows.height == 0:
            if not only_unmatched:
                _nothing_to_report(report, summary, request.given)
        elif request.fmt == "table":
            _print_report(report, summary, request)
        else:
            _write_report(report, summary, request)

    start = replays.mark()
    show(report.read_summary(cache_use))
    # When the index holds every file now, the next run over them prints this report served from it: keep
    # that output (``frames.replays.foresee``), so the first re-run is already replayed.
    stamps, inputs = cache_use.stamps, cache_use.inputs
    fresh = not (cache_use.corpus_hit or cache_use.notice or report.problems)
    if stamps is not None and inputs is not None and fresh:
        served = CacheUse(enabled=True, corpus_hit=True, files_cached=len(stamps))
        replays.foresee(start, lambda: show(report.read_summary(served)), inputs)
    if request.output is not None and not (request.fmt == "table" and report.rows.height == 0):
        options.say_written(request.output)  # an empty table writes nothing: _nothing_to_report says so
    return _exit_status(request.paths, report, unmatched, strict=strict)


def _report(
    request: StatsRequest, *, cache: bool, cache_dir: Path | None, warn: Callable[[str], None]
) -> tuple[StatsReport, CacheUse]:
    """The report, from the dataset or the sessions PATHS name (a progress bar when reading takes a while);
    a run served from the index is told to ``frames.replays``, which may replay its output next time."""
    from ctxtool.frames.loading import CacheUse
    from ctxtool.stats import needs_detail, read_report, stats_report, tally_report

    subagents = request.query.subagents
    if request.dataset is not None:
        from ctxtool import export

        query = request.query
        summing = query.by not in (None, "session", "turn", "request") and not query.live
        if query.top is None and (summing or (not needs_detail(query) and query.by == "session")):
            # A report that sums requests (under any filter but --live) or lists sessions: the dataset's
            # messages are not read (but their times, for --since and --until).
            sums = (query.by, query.timezone) if summing and query.by is not None else True
            filters = query.filters if summing else None
            t = export.load_dataset(request.dataset, subagents=subagents, sums=sums, filters=filters).tally
            made = tally_report(t, query, warn=warn)
            assert made is not None  # (no message columns needed: needs_detail)
            return made, CacheUse()
        days = (query.filters.get("since"), query.filters.get("until"))
        dated = days != (None, None) and query.top is None
        corpus = export.load_dataset(request.dataset, subagents=subagents, days=days if dated else None)
        return stats_report(corpus, query, warn=warn), CacheUse()
    if request.fmt == "table":
        # The table's printer (rich: 0.03-0.04 s to import) now, while a head start's process reads the files
        # beside this one (``ctxtool.launch``): after the reading, that process would wait for it.
        import ctxtool.render.tables  # noqa: F401
    progress = _DelayedProgress(options.progress_wanted())
    try:
        report, cache_use = read_report(
            request.paths, request.query, cache=cache, cache_dir=cache_dir, progress=progress, warn=warn
        )
    finally:
        progress.close()
    if progress.bar is not None:
        cache_use.stamps = None  # the next run shows no progress: its output cannot be foreseen
    if cache_use.notice:
        print(f"notice: {cache_use.notice}", file=sys.stderr)
    from ctxtool.frames import replays
    from ctxtool.session.discover import default_roots

    targets = request.paths or [str(root) for root in default_roots()]
    replays.loaded(targets, subagents, warm=cache_use.corpus_hit and not cache_use.notice)
    return report, cache_use


def _write_top(report: StatsReport, request: StatsRequest) -> None:
    """``stats --top N``: the largest items in each session's context at its last request."""
    n = request.query.top
    if request.fmt != "table":
        from ctxtool.render import formats as out

        out.write_output(out.encode(report.rows, request.fmt, by="top", top=n, estimate=True), request.output)
        return
    from ctxtool.render import tables as render

    with render.output_console(request.output, width=request.width, color=request.color) as console:
        title = f"ctxtool stats --top {n}: the largest items in context at each session's last request"
        table, notes = render.top_table(report.rows, title=title, width=console.width, wide=request.wide)
        render.print_table(console, table, wide=request.wide)
        for note in notes:
            console.print(note)


def _nothing_to_report(report: StatsReport, summary: dict[str, Any], given: tuple[str, ...]) -> None:
    """An empty table is one line on stderr: what was read, and the filters that left nothing of it."""
    from ctxtool import frames

    n = report.sessions_read
    why = (
        f" {plural(n, 'session')} {'was' if n == 1 else 'were'} read, but nothing"
        f" matches {' '.join(given)}: loosen or drop {'it' if len(given) == 1 else 'them'}."
        if given and n
        else ""
    )
    print(f"{frames.describe_read(summary)} Nothing to report.{why}", file=sys.stderr)


def _print_report(report: StatsReport, summary: dict[str, Any], request: StatsRequest) -> None:
    """The table, with a totals row of every row (whatever --limit shows) and a caption of what was read."""
    from ctxtool import frames
    from ctxtool.render import tables as render

    with render.output_console(request.output, width=request.width, color=request.color) as console:
        title = f"ctxtool stats --by {report.by}" + (" (live history only)" if request.query.live else "")
        if report.limited:
            shown, every = report.rows.height, report.all_rows.height
            title += f": top {shown:,} of {every:,} rows (totals of all {every:,})"
        sums = report.totals()
        notes = [frames.describe_read(summary), render.unpriced_note(int(sums.get("unpriced") or 0))]
        notes.append(render.hidden_note(*report.hidden_calls()))
        table = render.stats_table(
            report.rows,
            sums,
            by=report.by,
            title=title,
            caption="\n".join(n for n in notes if n),
            single_session=report.single_session,
            width=console.width,
            wide=request.wide,
        )
        render.print_table(console, table, wide=request.wide)


def _write_report(report: StatsReport, summary: dict[str, Any], request: StatsRequest) -> None:
    """JSON (an envelope with the totals, and ``rows_total`` under --limit), JSON lines, CSV or Parquet."""
    from ctxtool.render import formats as out

    view = "live" if request.query.live else "billed"
    envelope: dict[str, Any] = {"command": "stats", "by": report.by, "view": view, "read": summary}
    if request.fmt == "json":
        envelope["totals"] = report.totals()
    if report.limited:
        envelope["rows_total"] = report.all_rows.height
    out.write_output(out.encode(report.rows, request.fmt, **envelope), request.output)


def _exit_status(paths: list[str], report: StatsReport, unmatched: list[str], *, strict: bool) -> int:
    """1 when a PATH given explicitly names nothing (said on stderr) or could not be read, or with --strict
    when anything could not be read in full."""
    from ctxtool import frames
    from ctxtool.session.discover import matches_nothing, refused_paths

    for path in unmatched:
        print(f"Error: {matches_nothing(path)}", file=sys.stderr)
    if paths and report.sessions_read == 0 and not unmatched:
        where = " ".join(paths)
        print(f"Error: no session in {where}. Pass session files or a chats/ folder", file=sys.stderr)
    if unmatched or (paths and report.sessions_read == 0):
        return ExitStatus.ERROR  # an explicit PATH that names nothing is a mistake, not an empty report
    if paths and frames.problem_counts(report.problems)["no_sessions"]:
        return ExitStatus.ERROR  # so is a folder given explicitly that holds no session (warned above)
    if refused_paths(paths):
        return ExitStatus.ERROR  # a PATH given explicitly could not be read (named in a warning above)
    return ExitStatus.ERROR if strict and (report.problems or report.broken_lines > 0) else ExitStatus.OK


def _unmatched(paths: list[str]) -> list[str]:
    """The PATH arguments that name no existing file, directory or glob match (a store URL is a dataset,
    which reading it checked)."""
    import glob
    import os

    from ctxtool.store import is_store_url

    return [
        p
        for p in paths
        if not is_store_url(p)
        and not Path(p).expanduser().exists()
        and not glob.glob(os.path.expanduser(p), recursive=True)
    ]
