"""``ctxtool report PATHS --output report.html``: one self-contained HTML page to look at."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ctxtool.cli import options
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import UsageError

if TYPE_CHECKING:
    from ctxtool.frames.model import Corpus

HELP = """Write one self-contained HTML page about Gemini CLI sessions: spend over time (by day, model and
project); for the largest sessions, context per request against the model's limit and Gemini CLI's
compression threshold (50% of the limit), stacked by what fills it, with compressions, rewinds,
rollbacks and model switches marked; the top context consumers; and with --compare, the compaction
strategies' tokens before/after and fact retention side by side.

PATHS are session files, directories or globs; with none, the Gemini CLI data root is scanned. The page
loads nothing from the network (the chart runtime, Vega-Lite, is inlined; about 1 MB) and shows
session text HTML-escaped, secrets redacted unless --show-secrets. What fills the context is an
estimate: each part of the history is estimated with Gemini CLI's own estimator and scaled to the
prompt tokens recorded for the request; overhead is what the history does not explain.

Examples:

\b
  ctxtool report --output report.html
  ctxtool report ~/.gemini/tmp/myproj/chats/ --sessions 3 --output myproj.html
  ctxtool report SESSION.jsonl --compare --output session.html

Exit status: 0 written; 1 a PATH matched no session or a file could not be read with --strict;
2 usage error.
"""


def report(
    paths: list[str] = options.PATHS,
    output: Path = typer.Option(
        ..., "--output", "-o", metavar="FILE", help="The HTML file to write (*.html)."
    ),
    sessions: int = typer.Option(
        5,
        "--sessions",
        min=1,
        metavar="N",
        help="Chart the context of the N largest sessions (by peak context).",
    ),
    top: int = typer.Option(
        10, "--top", min=1, metavar="N", help="Top context consumers listed per session."
    ),
    compare: bool = typer.Option(
        False,
        "--compare",
        help="Also run the compaction strategies (offline) on the charted sessions and show them side by "
        "side (slower).",
    ),
    subagents: bool = typer.Option(
        True,
        "--subagents/--no-subagents",
        help="Include subagent sessions (chats/<parent-id>/*.json[l], and flat files of kind subagent).",
    ),
    strict: bool = options.STRICT,
    no_cache: bool = options.NO_CACHE,
    cache_dir: Path = options.CACHE_DIR,
    show_secrets: bool = options.SHOW_SECRETS,
) -> int:
    if output.suffix.lower() not in (".html", ".htm"):
        raise UsageError(
            f"--output {output} is not an HTML file", "Name it *.html, e.g. --output report.html"
        )
    from ctxtool.export import load_sessions_or_dataset as load_corpus

    status = _Status(options.progress_wanted())
    try:
        corpus, cache_use = load_corpus(
            paths or [], subagents=subagents, cache=not no_cache, cache_dir=cache_dir, progress=status.reading
        )
        if cache_use.notice:
            print(f"notice: {cache_use.notice}", file=sys.stderr)
        from ctxtool import frames

        for warning in frames.read_warnings(corpus):
            print(f"warning: {warning}", file=sys.stderr)
        if corpus.requests.height == 0:
            where = " ".join(paths) if paths else "the Gemini CLI data root"
            print(
                f"Error: no request recorded in {where}. Pass session files or a chats/ folder",
                file=sys.stderr,
            )
            return ExitStatus.ERROR
        from ctxtool.render import formats as out
        from ctxtool.report import page as html_report

        compare_rows = _compare(corpus, sessions, show_secrets, status) if compare else None
        status.step("drawing the page")
        page = html_report.build_report(
            corpus, sessions=sessions, top=top, compare_rows=compare_rows, redact=not show_secrets
        )
        out.atomic_write(output, page.encode("utf-8"))
    finally:
        status.close()
    options.say_written(output)
    counts = frames.problem_counts(corpus.problems)
    if paths and (counts["missing"] or counts["no_sessions"]):
        # A PATH given explicitly matched no session (warned above): an error, though the rest is written.
        return ExitStatus.ERROR
    failed = bool(corpus.problems) or corpus.broken_lines > 0
    return ExitStatus.ERROR if strict and failed else ExitStatus.OK


class _Status:
    """What the command is doing, as one spinner line on stderr, only where ``options.progress_wanted``
    (a terminal, not CI): reading the sessions (share of their bytes), comparing, drawing, writing."""

    def __init__(self, enabled: bool) -> None:
        self.live: Any = None
        if enabled:
            from rich.console import Console

            self.live = Console(stderr=True).status("reading sessions")
            self.live.start()

    def step(self, text: str) -> None:
        if self.live is not None:
            self.live.update(text)

    def reading(self, done: int, total: int) -> None:
        """``load_corpus``'s progress: bytes read of ``total``."""
        if self.live is not None and total:
            self.live.update(f"reading sessions ({done / total:.0%})")

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def _compare(corpus: Corpus, sessions: int, show_secrets: bool, status: _Status) -> list[dict[str, Any]]:
    """``ctxtool compare``'s rows (offline summarizer, every strategy) for the ``sessions`` largest."""
    import polars as pl

    from ctxtool import compare as lib
    from ctxtool.compress.summarize.offline import OfflineSummarizer
    from ctxtool.report import charts

    status.step("running the compaction strategies")
    keys = charts.largest_sessions(corpus, sessions)
    files = (
        corpus.sessions.filter(pl.col("session_key").is_in(keys) & pl.col("file").is_not_null())
        .get_column("file")
        .to_list()
    )
    rows = lib.compare_sessions([Path(f) for f in files], list(lib.DEFAULT_STRATEGIES), OfflineSummarizer())
    if not show_secrets:
        from ctxtool.common.secret_scan import redact_value

        rows = redact_value(rows)
    for row in rows:
        if row.get("error"):
            print(f"Error: {row['session']} ({row['strategy']}): {row['error']}", file=sys.stderr)
    return rows
