"""Choices the command line validates before any heavy module is imported."""

from __future__ import annotations

BY_CHOICES: tuple[str, ...] = (
    "turn",
    "request",
    "session",
    "model",
    "project",
    "day",
    "week",
    "month",
    "user",
    "machine",
)
MACHINE_FORMATS: tuple[str, ...] = ("json", "jsonl", "csv", "parquet")
FORMATS: tuple[str, ...] = ("table", *MACHINE_FORMATS)

# What an --output file's suffix names; a suffix not listed here (e.g. .txt, .log) leaves the format to
# --format (default: table).
SUFFIX_FORMATS: dict[str, str] = {
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".md": "markdown",
    ".markdown": "markdown",
    ".xml": "junit",
    # Formats no command writes to a table or data file: naming one is a usage error, never a text table
    # written under a spreadsheet's or a page's name.
    ".xlsx": "xlsx",
    ".xls": "xls",
    ".ods": "ods",
    ".tsv": "tsv",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".png": "png",
    ".svg": "svg",
}


def output_format(fmt: str | None, output: object, supported: tuple[str, ...], command: str = "") -> str:
    """The format to write: the one ``--output``'s suffix names, else ``--format``, else ``table``. A suffix
    naming a format this command cannot write, or contradicting ``--format``, is a usage error."""
    from pathlib import PurePath

    from ctxtool.common.errors import UsageError, use_one_of

    if fmt is not None and fmt not in supported:
        by = f" by {command}" if command else ""
        raise UsageError(f"--format {fmt!r} is not supported{by}", use_one_of(fmt, supported))
    named = SUFFIX_FORMATS.get(PurePath(str(output)).suffix.lower()) if output is not None else None
    if named is not None and named not in supported:
        raise UsageError(
            f"--output {output} names {named}, which this command does not write",
            f"Name the file for one of {', '.join(f for f in supported if f != 'table')}",
        )
    if named is not None and fmt is not None and fmt != named:
        raise UsageError(
            f"--format {fmt} contradicts --output {output} (which names {named})",
            f"Drop --format (the suffix decides), or name the file *.{fmt}",
        )
    return named or fmt or "table"
