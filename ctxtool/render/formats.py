"""Machine-readable output: json, jsonl, csv and parquet, written the same way by every command.

Owns: the JSON envelope (``schema_version``), value conversion (datetimes as ISO 8601, dates as YYYY-MM-DD),
a report's plain rows as the frame the frames would make (CSV and Parquet), and atomic file writes. Must not:
import rich or decide anything about terminals.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable
from datetime import date, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from ctxtool.frames.shape import COLUMNS, SCHEMA_VERSION, RowTable, frame_of

if TYPE_CHECKING:
    import polars as pl

__all__ = ["atomic_write", "dumps", "encode"]


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(obj: Any, *, indent: bool = True) -> bytes:
    # ISO 8601 UTC with a Z (2026-04-05T18:01:30.114000Z), as ccusage writes and jq users expect.
    option = orjson.OPT_NON_STR_KEYS | orjson.OPT_UTC_Z | (orjson.OPT_INDENT_2 if indent else 0)
    return orjson.dumps(obj, default=_default, option=option)


# Columns the frames hold as one comma-joined string (a table cell, a CSV field) and machine formats that
# can hold a list write as a list: those of type ``list[str]`` (``ctxtool.frames.shape``).
LIST_COLUMNS = tuple(c.name for c in COLUMNS if c.type == "list[str]")


def with_lists(rows: pl.DataFrame) -> pl.DataFrame:
    """``models`` (and the other LIST_COLUMNS) as lists of strings: ``[]`` for none."""
    import polars as pl

    return rows.with_columns(
        pl.col(c).fill_null("").str.split(",").list.eval(pl.element().filter(pl.element() != "")).alias(c)
        for c in LIST_COLUMNS
        if c in rows.columns and rows.schema[c] == pl.String
    )


def row_dicts(rows: pl.DataFrame | RowTable) -> list[dict[str, Any]]:
    """The rows as dicts, LIST_COLUMNS as lists (``with_lists``), from a frame or a ``RowTable``."""
    if not isinstance(rows, RowTable):
        return with_lists(rows).to_dicts()
    dicts = rows.to_dicts()
    for c in [c for c in LIST_COLUMNS if c in rows.columns]:
        for d in dicts:
            d[c] = [x for x in (d[c] or "").split(",") if x]
    return dicts


def encode(rows: pl.DataFrame | RowTable, fmt: str, **envelope: Any) -> bytes:
    if fmt == "json":
        return dumps({"schema_version": SCHEMA_VERSION, **envelope, "rows": row_dicts(rows)}) + b"\n"
    if fmt == "jsonl":
        return b"".join(dumps(row, indent=False) + b"\n" for row in row_dicts(rows))
    if isinstance(rows, RowTable):
        rows = frame_of(rows)
    if fmt == "csv":
        return rows.write_csv().encode("utf-8")
    if fmt == "parquet":
        buf = io.BytesIO()
        with_lists(rows).write_parquet(buf)
        return buf.getvalue()
    raise ValueError(f"unknown format {fmt!r}")


def atomic_write(path: Path, chunks: Iterable[bytes] | bytes) -> None:
    """``ctxtool.session.write.atomic_write``, imported only to write (stats imports this module each run)."""
    from ctxtool.session.write import atomic_write as write

    write(Path(path), chunks)


def open_text(path: Path) -> IO[str]:
    """``path`` opened for a table written as text (``--output report.txt``), its folder created; an
    OutputError names it when it cannot be."""
    from ctxtool.common.errors import OutputError

    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise OutputError(path, exc) from exc


def write_stdout(data: bytes, stream: IO[bytes]) -> None:
    stream.write(data)
    stream.flush()


def write_output(data: bytes, output: Path | None) -> None:
    """``data`` into the file ``--output`` names (atomically), else onto standard output."""
    if output:
        atomic_write(output, data)
    else:
        write_stdout(data, sys.stdout.buffer)
