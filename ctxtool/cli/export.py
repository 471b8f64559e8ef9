"""``ctxtool export [PATH...] --to DIR|URL``: a machine's usage into a Parquet dataset (a folder, a store)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ctxtool.cli import options
from ctxtool.cli.status import ExitStatus
from ctxtool.common.errors import UsageError
from ctxtool.common.wording import plural

if TYPE_CHECKING:
    from ctxtool.export import ExportResult

HELP = """Copy the usage of Gemini CLI sessions into a Parquet dataset: a folder, or a team's object store.

PATHS are session files, directories or globs; with none, the Gemini CLI data root is scanned
($GEMINI_CLI_HOME/.gemini/tmp if set, else ~/.gemini/tmp). --to is a folder or a URL: s3://bucket/prefix (S3
and the S3-compatible stores: R2, MinIO, GCS's S3 API), gs://bucket/prefix or az://container/prefix, with
credentials from the standard variables and chains (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_PROFILE,
AWS_REGION; AWS_ALLOW_HTTP=true for an http:// endpoint; GOOGLE_APPLICATION_CREDENTIALS; AZURE_STORAGE_*).

Each machine writes its own objects, <table>/machine=<machine>/<session>.parquet, one per session and table,
each written whole: any number of machines may export to one URL at once, as often as they like, and a
reader (ctxtool, DuckDB, Spark, polars) sees every billed request exactly once at every instant. A run
writes only the sessions that changed since this machine's last run; sessions whose files were deleted
stay. The dataset holds usage only (tokens, costs, models, tool names, times, ids, project names, user and
machine); --with-text adds the text (prompt previews, session summaries, tool targets) for this run.
Read it back with `ctxtool stats URL --by user` (docs/dataset.md has the schema and SQL for DuckDB and Spark).

Examples:

\b
  ctxtool export --to history
  ctxtool export --to s3://team-usage/gemini --user alice
  ctxtool stats s3://team-usage/gemini --by user

Exit status: 0 ok; 1 the dataset could not be written (a full disk, an unreachable store, no permission: one
line naming the cause), or with --strict when a file could not be read in full; 2 usage error.
"""


def export(
    paths: list[str] = options.PATHS,
    to: str = typer.Option(
        ...,
        "--to",
        "-t",
        "--output",
        "-o",
        metavar="DIR|URL",
        help="The dataset: a folder (created if missing) or s3://, gs://, az://bucket/prefix.",
    ),
    user: str | None = options.USER,
    machine: str | None = options.MACHINE,
    with_text: bool = typer.Option(
        False,
        "--with-text",
        help="Also keep the text: prompt previews, session summaries, tool targets (this run only).",
    ),
    show_secrets: bool = options.SHOW_SECRETS,
    json_out: bool = typer.Option(False, "--json", help="Print what the run did as JSON on standard output."),
    strict: bool = options.STRICT,
    no_cache: bool = options.NO_CACHE,
    cache_dir: Path = options.CACHE_DIR,
) -> int:
    from dataclasses import asdict

    from ctxtool import export as ex
    from ctxtool.frames.loading import load_corpus
    from ctxtool.render.formats import dumps
    from ctxtool.session.discover import default_roots, is_dataset

    for p in paths or []:
        if is_dataset(p):
            raise UsageError(f"{p} is a ctxtool dataset, not sessions", "Pass session files or directories")
    from ctxtool.common.identity import identity

    who = identity(user, machine)
    roots = [str(root) for root in default_roots()]
    # Session keys are paths: make them absolute so a later run from another directory finds the same ones.
    sources = [os.path.abspath(p) for p in paths] if paths else roots
    corpus, use = load_corpus(sources, cache=not no_cache, cache_dir=cache_dir)
    if use.notice:
        print(f"notice: {use.notice}", file=sys.stderr)
    for problem in corpus.problems:
        print(f"warning: {problem}", file=sys.stderr)
    if with_text:
        print(
            "notice: --with-text: this run writes prompt and response text into the dataset", file=sys.stderr
        )
    result = ex.export_corpus(
        corpus,
        to,
        who,
        roots=roots,
        sources=sources,
        with_text=with_text,
        show_secrets=show_secrets,
        state_dir=cache_dir,
        remember=not no_cache,
    )
    if json_out:
        doc = asdict(result)
        doc = {"schema_version": ex.DATASET_SCHEMA_VERSION, "dataset": doc.pop("target"), **doc}
        sys.stdout.buffer.write(dumps(doc) + b"\n")
        sys.stdout.flush()
    else:
        print(describe(result), file=sys.stderr)
    failed = bool(corpus.problems) or corpus.broken_lines > 0
    return ExitStatus.ERROR if strict and failed else ExitStatus.OK


def describe(result: ExportResult) -> str:
    """One line saying what an export run did."""
    where = f"{result.target} (machine {result.machine}, user {result.user})"
    if not result.written and not result.removed:
        return f"Nothing new: {plural(result.unchanged, 'session')} already in {where} and unchanged."
    text = (
        f"Wrote {plural(len(result.written), 'session')} "
        f"({plural(result.rows.get('requests', 0), 'request')}, "
        f"{plural(result.objects, 'object')}) to {where}; {result.unchanged:,} unchanged."
    )
    if result.removed:
        text += f" Removed {plural(result.removed, 'session')} that became part of another."
    return text
