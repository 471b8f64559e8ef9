"""The model's types: ``Corpus`` (the frames of a set of sessions), its schemas, the problems met while
reading, and the token and cost expressions every grain shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    pass


from ctxtool.frames.reading import PROBLEM_KINDS, Problem, ProblemKind
from ctxtool.frames.shape import COMPOSITION_COLUMNS, SCHEMA_VERSION
from ctxtool.session.schema import TOKEN_KEYS
from ctxtool.session.stamp import MESSAGE_COLUMNS

# Defined without polars (ctxtool.frames.reading, ctxtool.frames.shape) and re-exported here.
__all__ = ["COMPOSITION_COLUMNS", "PROBLEM_KINDS", "SCHEMA_VERSION", "Problem", "ProblemKind"]


TOKEN_COLUMNS = TOKEN_KEYS  # the counts of a request, as Gemini CLI names them
Progress = Callable[[int, int], None]


class _Later:
    """A frame field that may be given as a function that computes the frame, run when it is first read.

    Reports that never read a frame (``stats --by session`` reads neither turns nor tool calls) skip the
    work of building it; anything that reads it gets the same frame as if it had been built at once.
    """

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


MESSAGE_SCHEMA: dict[str, Any] = {
    "message_id": pl.String,
    "type": pl.String,
    "timestamp": pl.String,
    "live": pl.Boolean,
    "text_chars": pl.Int64,
    "content_bytes": pl.Int64,
    "is_prompt": pl.Boolean,
    "is_command": pl.Boolean,
    "is_snapshot": pl.Boolean,
    "compression_info": pl.Boolean,
    "model": pl.String,
    "preview": pl.String,
    "tool_calls": pl.Int64,
    "tool_errors": pl.Int64,
    **dict.fromkeys(TOKEN_COLUMNS, pl.Int64),
    **dict.fromkeys(MESSAGE_COLUMNS[-8:], pl.Int64),
}
TOOL_SCHEMA: dict[str, Any] = {
    "message_id": pl.String,
    "call_id": pl.String,
    "name": pl.String,
    "status": pl.String,
    "timestamp": pl.String,
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
    "summary": pl.String,
    "derived_from": pl.String,
    "compacted_at": pl.String,
    "start_time": pl.String,
    "last_updated": pl.String,
    "broken_lines": pl.Int64,
    "invalid_utf8_lines": pl.Int64,
    "first_invalid_utf8_line": pl.Int64,
    "first_broken_line": pl.Int64,
    "first_overlong_line": pl.Int64,
    "rewinds": pl.Int64,
    "checkpoints": pl.Int64,
    "live_messages": pl.Int64,
}


TS_TYPE = pl.Datetime("us", "UTC")
