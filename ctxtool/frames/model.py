"""The model's types: ``Corpus`` (the frames of a set of sessions), its schemas, the problems met while
reading."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ctxtool.frames.reading import Problem
from ctxtool.frames.shape import COMPOSITION_COLUMNS, SCHEMA_VERSION
from ctxtool.frames.tally import _TYPE_NAMES
from ctxtool.session.schema import TOKEN_KEYS
from ctxtool.session.stamp import MESSAGE_COLUMNS

# Defined without polars (ctxtool.frames.reading, ctxtool.frames.shape) and re-exported here.
__all__ = ["COMPOSITION_COLUMNS", "SCHEMA_VERSION", "Problem"]


TOKEN_COLUMNS = TOKEN_KEYS  # the counts of a request, as Gemini CLI names them
Progress = Callable[[int, int], None]


class _Later:
    """A frame field that may be given as a function that computes the frame, run when it is first read:
    reports that never read a frame skip the work of building it."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = "_" + name

    def __get__(self, obj: object, objtype: type | None = None) -> pl.DataFrame:
        if obj is None:
            raise AttributeError(self._name)  # no default: the field must be given
        value: pl.DataFrame | Callable[[], pl.DataFrame] = obj.__dict__[self._name]
        if not isinstance(value, pl.DataFrame):
            value = obj.__dict__[self._name] = value()
        return value

    def __set__(self, obj: object, value: pl.DataFrame | Callable[[], pl.DataFrame]) -> None:
        obj.__dict__[self._name] = value


@dataclass
class Corpus:
    """What was read: the frames plus an account of every file."""

    sessions: pl.DataFrame
    messages: pl.DataFrame
    requests: pl.DataFrame
    tool_calls: _Later = _Later()
    turns: _Later = _Later()
    files_read: int = 0
    files_found: int = 0
    bytes_read: int = 0
    problems: list[Problem] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    broken_lines: int = 0
    # The tool-call rows as read (``tool_calls`` without the turn and session columns joined on); None for a
    # corpus read from an export's dataset, which holds only the joined ones.
    calls: pl.DataFrame | None = None
    # The engine's tally the frames were built from (``ctxtool.frames.corpus``): what a report, a filter and
    # the live view are made of. None for a corpus read from an export's dataset.
    tally: Any = None
    # A filter's or the live view's corpus: the corpus and the filters it is a view of (``query.live_only``).
    view_of: tuple[Corpus, dict[str, Any]] | None = None


# The message columns of the frames, of the types the engine holds them in (``tally._TYPE_NAMES``).
MESSAGE_SCHEMA: dict[str, Any] = {
    n: getattr(pl, kind) for n, kind in zip(MESSAGE_COLUMNS, _TYPE_NAMES, strict=True)
}
TOOL_SCHEMA: dict[str, Any] = {
    **dict.fromkeys(("message_id", "call_id", "name", "status", "timestamp"), pl.String),
    "result_bytes": pl.Int64,
    "target": pl.String,
}


SESSION_META_SCHEMA: dict[str, Any] = {
    "session_key": pl.String,
    "group_key": pl.String,
    "parent_ref": pl.String,
    "session": pl.String,
    "session_id": pl.String,
    "project": pl.String,
    "project_dir": pl.String,
    "project_hash": pl.String,
    "kind": pl.String,
    "parent_session_key": pl.String,
    "root_session_key": pl.String,
    "file": pl.String,
    "files": pl.Int64,
    "era": pl.String,
    **dict.fromkeys(("summary", "derived_from", "compacted_at", "start_time", "last_updated"), pl.String),
    "broken_lines": pl.Int64,
    "invalid_utf8_lines": pl.Int64,
    "first_invalid_utf8_line": pl.Int64,
    "first_broken_line": pl.Int64,
    "first_overlong_line": pl.Int64,
    **dict.fromkeys(("rewinds", "checkpoints", "live_messages"), pl.Int64),
}


TS_TYPE = pl.Datetime("us", "UTC")
