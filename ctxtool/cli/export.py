"""``ctxtool export [PATH...] --to DIR``: keep session history as a hive-partitioned Parquet dataset."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ctxtool.cli import options
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import UsageError
from ctxtool.common.wording import plural
from ctxtool.export import EXPORT_WAIT

if TYPE_CHECKING:
    from ctxtool.export import ExportResult, PendingSession

HELP = """Copy the frames of Gemini CLI sessions into a Parquet dataset that outlives Gemini CLI's retention.

PATHS are session files, directories or globs; with none, the Gemini CLI data root is scanned
($GEMINI_CLI_HOME/.gemini/tmp if set, else ~/.gemini/tmp). DIR gets one folder per table (sessions, messages,
requests, tool_calls, turns), partitioned as project=<p>/day=<YYYY-MM-DD>, and a manifest
_ctxtool_manifest.json. Run it as often as you like: new sessions are appended, sessions Gemini CLI appended
to since are replaced (never duplicated), unchanged ones are skipped, and sessions whose files were deleted
stay. Read it back with `ctxtool stats DIR`, or query it with DuckDB, Spark or polars.

While another export or `ctxtool archive` writes DIR it waits (up to --wait seconds, saying so on standard
error). Sessions an archive hook could not add (DIR/.ctxtool-pending) are added too. A run that was
interrupted (killed, a full disk) is repaired by the next one: its leftover files are removed first.

Examples:

\b
  ctxtool export --to history
  ctxtool stats history --by month
  duckdb -c "select sum(total) from 'history/requests/**/*.parquet'"

Exit status: 0 ok; 1 DIR could not be written (a full disk, no permission: one line naming the cause), or
with --strict when a file could not be read in full; 2 usage error.
"""


def export(
    paths: list[str] = options.PATHS,
    to: Path = typer.Option(
        ...,
        "--to",
        "-t",
        "--output",
        "-o",
        metavar="DIR",
        help="The dataset directory (created if missing).",
    ),
    prompts: bool = typer.Option(
        True,
        "--prompts/--no-prompts",
        help="Keep prompt text (turn prompts, message previews, session summaries) in the dataset.",
    ),
    show_secrets: bool = options.SHOW_SECRETS,
    json_out: bool = typer.Option(False, "--json", help="Print what the run did as JSON on standard output."),
    strict: bool = options.STRICT,
    no_cache: bool = options.NO_CACHE,
    cache_dir: Path = options.CACHE_DIR,
    wait: float = typer.Option(
        EXPORT_WAIT,
        "--wait",
        metavar="SECONDS",
        min=0,
        envvar="CTXTOOL_EXPORT_WAIT",
        help="How long to wait for another export or archive writing DIR (0: fail at once).",
    ),
) -> int:
    from ctxtool import export as ex
    from ctxtool.session.discover import is_dataset

    for p in paths or []:
        if is_dataset(p):
            raise UsageError(f"{p} is a ctxtool dataset, not sessions", "Pass session files or directories")

    from ctxtool.render.formats import dumps
    from ctxtool.session.discover import default_roots

    # Session keys are paths: make them absolute so a later run from another directory finds the same ones.
    sources = [os.path.abspath(p) for p in paths] if paths else [str(root) for root in default_roots()]
    from ctxtool.frames.loading import load_corpus

    pending, extra = _claim_pending(to, sources)
    try:
        corpus, use = load_corpus([*sources, *extra], cache=not no_cache, cache_dir=cache_dir)
        if use.notice:
            print(f"notice: {use.notice}", file=sys.stderr)
        for problem in corpus.problems:
            print(f"warning: {problem}", file=sys.stderr)
        result = ex.export_corpus(
            corpus,
            to,
            prompts=prompts,
            show_secrets=show_secrets,
            wait=wait,
            on_wait=lambda: _waiting(to, wait),
        )
        for entry in pending:
            entry.done()
    finally:
        for entry in pending:
            entry.release()

    if json_out:
        sys.stdout.buffer.write(dumps(_json_doc(result)) + b"\n")
        sys.stdout.flush()
    else:
        print(describe(result), file=sys.stderr)
    failed = bool(corpus.problems) or corpus.broken_lines > 0
    return ExitStatus.ERROR if strict and failed else ExitStatus.OK


def _claim_pending(to: Path, sources: list[str]) -> tuple[list[PendingSession], list[str]]:
    """The sessions an archive hook left in the pending list of ``to`` (held by this run until it is done),
    and their files that ``sources`` do not hold already (adding those would only change the cache's key)."""
    from ctxtool import export as ex

    pending = ex.claim_pending(to)
    if pending:
        what = plural(len(pending), "session")
        print(f"notice: also adding {what} an earlier ctxtool archive could not add", file=sys.stderr)
    roots = [Path(s) for s in sources]
    extra = [f for f in ex.pending_files(pending) if not any(Path(f).is_relative_to(r) for r in roots)]
    return pending, extra


def _waiting(to: Path, wait: float) -> None:
    print(
        f"ctxtool export: another ctxtool export or archive is writing {to}; waiting up to {wait:g} s for it",
        file=sys.stderr,
    )


def _json_doc(result: ExportResult) -> dict[str, Any]:
    from ctxtool import export as ex

    return {
        "schema_version": ex.DATASET_SCHEMA_VERSION,
        "directory": str(result.directory),
        "run": result.run,
        "added": list(result.added),
        "replaced": list(result.replaced),
        "unchanged": result.unchanged,
        "retained": result.retained,
        "sessions": result.sessions,
        "rows": result.rows,
        "parts_written": result.parts_written,
        "parts_removed": result.parts_removed,
        "leftovers_removed": result.leftovers_removed,
    }


def describe(result: ExportResult) -> str:
    """One line saying what an export run did."""
    if result.run is None:
        text = (
            f"Nothing new: {plural(result.unchanged, 'session')} already in {result.directory} and unchanged."
        )
    else:
        text = (
            f"Run {result.run}: added {plural(len(result.added), 'session')} and replaced "
            f"{len(result.replaced):,} ({plural(result.rows.get('requests', 0), 'request')}) "
            f"in {result.directory}; "
            f"{result.unchanged:,} unchanged."
        )
    if result.retained:
        text += f" {result.retained:,} kept from earlier runs (not in this input)."
    if result.leftovers_removed:
        text += f" Removed {plural(result.leftovers_removed, 'file')} an interrupted run had left."
    return text + f" The dataset holds {plural(result.sessions, 'session')}."


def register(app: typer.Typer) -> None:
    app.command("export", help=HELP)(export)
