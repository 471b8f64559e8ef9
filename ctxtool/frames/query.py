"""Questions asked of a ``Corpus``: filters, the live view, the ``--by`` reports, totals and what reading met,
each answered by the engine the corpus was built from (``Corpus.tally``: ``ctxtool.frames.tally`` and
``ctxtool.frames.views``), as polars frames. Nothing here derives a figure of its own."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

import polars as pl

from ctxtool.common.choices import BY_CHOICES
from ctxtool.frames import tally, views
from ctxtool.frames.corpus import narrowed
from ctxtool.frames.model import Corpus
from ctxtool.frames.shape import REPORT_COLUMNS, RowTable, frame_of, totals_of


def _tally(corpus: Corpus) -> Any:
    if corpus.tally is None:
        raise ValueError("this corpus holds no engine tally: build it with ctxtool.load")
    return corpus.tally


def filter_corpus(
    corpus: Corpus,
    *,
    since: date | None = None,
    until: date | None = None,
    projects: Sequence[str] = (),
    sessions: Sequence[str] = (),
    models: Sequence[str] = (),
) -> Corpus:
    """What the filters keep of ``corpus`` (``views.view``): requests of a UTC day in [since, until] and of a
    model equal to or starting with one of ``models``; sessions of a project (a part of its name, or its
    folder) and named by ``--session``."""
    filters = {"since": since, "until": until, "projects": projects, "sessions": sessions, "models": models}
    return narrowed(corpus, filters, live=False) if any(filters.values()) else corpus


def live_only(corpus: Corpus) -> Corpus:
    """The live view: only the requests and turns still in the history Gemini CLI would resume (of what a
    filter kept, when ``corpus`` is a filter's)."""
    base, filters = corpus.view_of if corpus.view_of is not None else (corpus, {})
    return narrowed(base, filters, live=True)


def report(
    corpus: Corpus, by: str, *, include_subagents_in_parent: bool = True, timezone: str | None = None
) -> pl.DataFrame:
    """The rows of ``ctxtool stats --by BY`` as a frame, Gemini CLI's ``input`` (the cached tokens in it).
    ``timezone`` (an IANA name; default UTC) decides which day, week (its Monday) or month a request falls
    in."""
    if by not in BY_CHOICES:
        raise ValueError(f"by must be one of {', '.join(BY_CHOICES)}")
    t = _tally(corpus)
    if by == "session":
        rows = [_unshown(row) for row in tally.session_rows(t, roll_up=include_subagents_in_parent)]
    elif by in ("turn", "request"):
        rows = views.turn_rows(t) if by == "turn" else views.request_rows(t)
    else:
        rows = [_unshown(row) for row in tally.request_rows(t, by, timezone)]
    return frame_of(RowTable(REPORT_COLUMNS[by], rows))


def _unshown(row: dict[str, Any]) -> dict[str, Any]:
    """A row as ``stats`` shows it (``tally.shown``) with Gemini CLI's ``input`` again."""
    row["input"] = row.pop("prompt_tokens")
    return row


def totals(df: pl.DataFrame) -> dict[str, Any]:
    """A totals row for a report: sums of the additive columns, max of the peaks (``shape.totals_of``)."""
    return totals_of(df.columns, lambda col: df.get_column(col).to_list())


def hidden_calls(corpus: Corpus) -> tuple[int, float]:
    """Gemini CLI's unrecorded compression calls over the corpus's sessions: (requests, estimated cost)."""
    return tally.hidden_calls(_tally(corpus))


def read_warnings(corpus: Corpus) -> list[str]:
    """What a command reading ``corpus`` should warn about, a line each."""
    return tally.warnings_of(_tally(corpus))


def read_summary(corpus: Corpus) -> dict[str, Any]:
    """What was read, for the JSON envelope and the table caption."""
    return tally.summary_of(_tally(corpus))
