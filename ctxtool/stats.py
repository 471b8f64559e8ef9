"""The reports of ``ctxtool stats``: a ``--by`` report or the ``--top`` consumers of a corpus, as values.

Owns: the sessions a report counts (the filters, the live view), the default ``--by`` (turn for one session,
else session), prompt and target text redacted unless asked, ``--sort`` and ``--limit``, the totals row (of
every row, whatever ``--limit`` shows) and the read summary of the JSON envelope. Never prints: warnings go
to the caller's ``warn``. polars and the frames are imported inside the functions that need them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ctxtool.common.errors import UsageError, use_one_of

if TYPE_CHECKING:
    from ctxtool.frames.loading import CacheUse
    from ctxtool.frames.model import Corpus
    from ctxtool.frames.reading import Problem
    from ctxtool.frames.tally import Tally


class StatsQuery(msgspec.Struct, frozen=True):
    """The report asked for: ``by`` (None: the default) or ``top`` N items, of what ``filters`` keep."""

    by: str | None = None
    top: int | None = None
    filters: Mapping[str, Any] = msgspec.field(default_factory=dict)
    live: bool = False
    subagents: bool = True
    timezone: str | None = None
    sort: str | None = None
    desc: bool = False
    limit: int | None = None
    show_secrets: bool = False


def with_index(summary: dict[str, Any], use: CacheUse) -> dict[str, Any]:
    names = ("enabled", "corpus_from_cache", "files_from_index", "files_resumed", "files_parsed")
    values = (use.enabled, use.corpus_hit, use.files_cached, use.files_resumed, use.files_parsed)
    summary["index"] = dict(zip(names, values, strict=True))
    return summary


class StatsReport(msgspec.Struct, frozen=True):
    """A report's rows: ``by`` is the ``--by`` report, or ``"top"``; ``tally`` what it counts; ``rows`` the
    rows shown (``--limit`` applied) and ``all_rows`` every row (a ``RowTable``, or a frame for ``--top``);
    ``sessions_read`` the number of sessions before the filters."""

    tally: Tally
    by: str
    rows: Any  # RowTable | pl.DataFrame
    all_rows: Any
    sessions_read: int
    single_session: bool  # one session besides its subagents

    @property
    def limited(self) -> bool:
        return bool(self.rows.height < self.all_rows.height)

    def totals(self) -> dict[str, Any]:
        """The totals of every row (whatever --limit shows); ``sessions`` counts each session once."""
        from ctxtool.frames.shape import totals_of

        sums = totals_of(self.all_rows.columns, lambda col: self.all_rows.get_column(col).to_list())
        if "sessions" in sums:
            sums["sessions"] = sum(
                bool(s.requests.costs) if s.requests is not None else s.row["requests"] > 0
                for s in self.tally.sessions
            )
        return sums

    def read_summary(self, use: CacheUse) -> dict[str, Any]:
        """What was read and how much of it ctxtool's index served (``use``)."""
        from ctxtool.frames.tally import summary_of

        return with_index(summary_of(self.tally), use)

    def hidden_calls(self) -> tuple[int, float]:
        """Gemini CLI's unrecorded compression calls in these sessions: (requests, estimated cost)."""
        from ctxtool.frames.tally import hidden_calls

        return hidden_calls(self.tally)

    @property
    def problems(self) -> list[Problem]:
        return self.tally.problems

    @property
    def broken_lines(self) -> int:
        return self.tally.broken_lines


def needs_detail(query: StatsQuery) -> bool:
    """Whether the report reads the sessions' message columns: a filter, the live view, the turn and
    request grains."""
    return bool(query.live or any(query.filters.values()) or query.by in ("turn", "request"))


def tally_report(t: Tally, query: StatsQuery, *, warn: Callable[[str], None]) -> StatsReport | None:
    """``stats_report`` of ``t`` without polars; None when ``t`` holds no message columns and the report
    needs them: a filter, ``--live``, or the default ``--by turn`` of one session."""
    from ctxtool.frames import tally, views
    from ctxtool.frames.shape import ROW_COLUMNS, RowTable

    detail = all(s.columns is not None for s in t.sessions)
    sessions_read = len(t.sessions) if t.read_sessions is None else t.read_sessions
    if t.read_sessions is None and (query.live or any(query.filters.values())):
        if not detail:
            return None
        t = views.view(t, query.filters, live=query.live)
    single = sum(s.parent_key is None for s in t.sessions) == 1
    by = query.by or ("turn" if single else "session")
    if by in ("turn", "request") and not detail:
        return None
    for warning in tally.warnings_of(t):
        warn(warning)
    if by == "session":
        made = tally.session_rows(t, roll_up=query.subagents)
    elif by in ("turn", "request"):
        grain = views.turn_rows(t) if by == "turn" else views.request_rows(t)
        made = [tally.shown(row, by) for row in grain]
        if by == "turn" and not query.show_secrets:
            from ctxtool.common.secret_scan import redact

            for row in made:
                row["prompt"] = row["prompt"] if row["prompt"] is None else redact(row["prompt"])
    else:
        made = tally.request_rows(t, by, query.timezone)
    columns = ROW_COLUMNS[by]
    if column := query.sort:  # --desc: largest first; nulls last, in their order where equal
        if column not in columns:
            raise UsageError(f"--sort {column!r} is not a column of --by {by}", use_one_of(column, columns))
        known = [row for row in made if row[column] is not None]
        known.sort(key=lambda row: row[column], reverse=query.desc)
        made = known + [row for row in made if row[column] is None]
    rows = RowTable(columns, made)
    shown = rows.head(query.limit) if query.limit else rows
    return StatsReport(t, by, shown, rows, sessions_read, single)


def stats_report(corpus: Corpus, query: StatsQuery, *, warn: Callable[[str], None]) -> StatsReport:
    """The report ``query`` asks of ``corpus`` (``--top`` of its frames); ``warn`` hears what reading met,
    before any usage error."""
    if query.top is None:
        made = tally_report(corpus.tally, query, warn=warn)
        assert made is not None  # (a corpus's tally holds its sessions' columns)
        return made
    from ctxtool.frames.composition import top_consumers
    from ctxtool.frames.query import filter_corpus, live_only, read_warnings

    sessions_read = corpus.sessions.height
    corpus = filter_corpus(corpus, **query.filters)
    if query.live:
        corpus = live_only(corpus)
    for warning in read_warnings(corpus):
        warn(warning)
    single = corpus.sessions.filter(corpus.sessions["parent_session_key"].is_null()).height == 1
    if query.by is not None:
        raise UsageError("--top and --by are two reports", "Pass one of them")
    rows = top_consumers(corpus, query.top)
    if not query.show_secrets:
        import polars as pl

        from ctxtool.common.secret_scan import redact

        texts = [None if text is None else redact(text) for text in rows.get_column("target").to_list()]
        rows = rows.with_columns(pl.Series("target", texts, dtype=pl.String))
    return StatsReport(corpus.tally, "top", rows, rows, sessions_read, single)


def read_report(
    paths: list[str],
    query: StatsQuery,
    *,
    cache: bool,
    cache_dir: Path | None,
    progress: Callable[[int, int], None] | None,
    warn: Callable[[str], None],
) -> tuple[StatsReport, CacheUse]:
    """The report ``query`` asks of the sessions under ``paths``, read for it (``frames.loading.read_tally``),
    without polars but for ``--top``."""
    from ctxtool.frames.loading import read_tally

    t, results, found, use = read_tally(
        paths,
        subagents=query.subagents,
        cache=cache,
        cache_dir=cache_dir,
        progress=progress,
        detail=needs_detail(query) or query.top is not None,
        requests=query.by not in (None, "session"),
        turns_of_one=query.by is None,  # (the default for one session is --by turn)
    )
    if query.top is None:
        report = tally_report(t, query, warn=warn)
        assert report is not None  # (read with the columns it needs)
        return report, use
    from ctxtool.frames.corpus import corpus_of

    return stats_report(corpus_of(t, results, found), query, warn=warn), use
