"""Questions asked of a ``Corpus``: filters, the ``--by`` reports, totals, the live view, and what
reading met."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    pass


from ctxtool.common.choices import BY_CHOICES
from ctxtool.frames.model import (
    TOKEN_COLUMNS,
    Corpus,
)
from ctxtool.frames.reading import broken_lines_warning, invalid_utf8_warning, summary
from ctxtool.frames.shape import REPORT_COLUMNS, totals_of
from ctxtool.measure.tokens import TOTAL_PARTS, describe_total_mismatches
from tests.oracle.exprs import cache_ratio_expr, cost_aggs, known_cost
from tests.oracle.sessions import REQUEST_COLUMNS, derived_from_sums, request_aggs, request_fills
from tests.oracle.turns import turns_frame, with_turn_counts


def _session_match(sessions: pl.DataFrame, wanted: str) -> pl.Expr:
    """Sessions that ``--session WANTED`` names: a session id or a unique prefix of one (the short id a table
    shows is such a prefix), or a file name with or without its extension, or the file's path. Never a
    substring found elsewhere in a name. A prefix shared by several sessions is a usage error listing them; a
    whole id that several files share (the a2a server writes a constant one) names them all."""
    from ctxtool.common.errors import UsageError

    exact = (
        (pl.col("session_id") == wanted)
        | (pl.col("session") == wanted)
        | (pl.col("session_key") == wanted)
        | (pl.col("file") == _as_path(wanted))
        | (pl.col("file").str.split("/").list.last() == wanted)
    )
    if sessions.filter(exact).height:
        return exact
    prefix = pl.col("session_id").str.starts_with(wanted)
    roots = sessions.filter(prefix & pl.col("parent_session_key").is_null())
    if roots.height > 1 and roots.get_column("session_id").n_unique() == 1:
        raise _shared_id(wanted, roots)
    if roots.height > 1:
        names = ", ".join(f"{r['session_id']} ({r['session']})" for r in roots.head(10).iter_rows(named=True))
        raise UsageError(
            f"--session {wanted} is ambiguous: {roots.height} sessions have an id starting with it: {names}",
            "Give more characters of the id",
        )
    return prefix


def _as_path(wanted: str) -> str:
    """``wanted`` as the absolute path a session's ``file`` holds (a name that is no path: one that matches
    no file)."""
    import os

    return os.path.abspath(os.path.expanduser(wanted))


def _shared_id(wanted: str, roots: pl.DataFrame) -> Exception:
    """The usage error for a ``--session`` prefix whose sessions all share one whole id (the a2a server gives
    each session it records ``a2a-server``): more characters of the id cannot tell them apart, their files
    can. The error's line says so; the candidates follow, one file a line, with when each started and its
    project."""
    from ctxtool.common.errors import UsageError

    shared = roots.get_column("session_id")[0]
    lines = []
    for r in roots.sort("start", nulls_last=True).head(10).iter_rows(named=True):
        start = f"started {r['start']:%Y-%m-%d %H:%M} UTC" if r["start"] is not None else "no start recorded"
        lines.append(f"  {r['file']}  ({start}, project {r['project']})")
    if roots.height > 10:
        lines.append(f"  … and {roots.height - 10} more")
    return UsageError(
        f"--session {wanted} matches {roots.height} sessions that all have the id {shared}, so more "
        "characters of it cannot tell them apart",
        f"Name one by its file: --session with its path or file name (or pass that file as PATH); "
        f"--session {shared} takes all {roots.height}:\n" + "\n".join(lines),
    )


# --- reports ---------------------------------------------------------------------------------------


def filter_corpus(
    corpus: Corpus,
    *,
    since: date | None = None,
    until: date | None = None,
    projects: Sequence[str] = (),
    sessions: Sequence[str] = (),
    models: Sequence[str] = (),
) -> Corpus:
    """Keep requests (and the turns/sessions they belong to) matching every filter given. ``models``: a
    request's model equals one of them or starts with it (``gemini-2.5`` names every 2.5 model); turns are
    then summed over the matching requests only."""
    if not (since or until or projects or sessions or models):
        return corpus
    keep = corpus.sessions
    if projects:
        keep = keep.filter(
            pl.any_horizontal(
                *[
                    pl.col("project").str.contains(p, literal=True) | (pl.col("project_dir") == p)
                    for p in projects
                ]
            )
        )
    if sessions:
        keep = keep.filter(pl.any_horizontal(*[_session_match(keep, s) for s in sessions]))
    # A subagent follows its parent session when filtering by session.
    roots = keep.get_column("session_key")
    keys = corpus.sessions.filter(
        pl.col("session_key").is_in(roots.implode()) | pl.col("root_session_key").is_in(roots.implode())
    ).get_column("session_key")

    def by_key(df: pl.DataFrame) -> pl.DataFrame:
        return df.filter(pl.col("session_key").is_in(keys.implode()))

    requests = by_key(corpus.requests)
    turns = by_key(corpus.turns)
    messages = by_key(corpus.messages)
    meta = by_key(corpus.sessions)
    if since or until:
        requests = requests.filter(_within_days("ts", since, until))
        messages = messages.filter(_within_days("ts", since, until))
        turns = turns.filter(_within_days("start", since, until))
        meta = meta.filter(pl.col("session_key").is_in(messages.get_column("session_key").unique().implode()))
    if models:
        requests = requests.filter(
            pl.any_horizontal(
                *[(pl.col("model") == m) | pl.col("model").str.starts_with(m) for m in models]
            ).fill_null(False)
        )
        used = requests.get_column("session_key").unique().implode()
        messages = messages.filter(pl.col("session_key").is_in(used))
        meta = meta.filter(pl.col("session_key").is_in(used))
        turns = turns_frame(messages, requests, meta).filter(pl.col("requests") > 0)
    if since or until or models:  # the turns left: what `--by turn` lists, so what a session counts
        meta = with_turn_counts(meta, turns)
    return replace(
        corpus,
        sessions=meta,
        messages=messages,
        requests=requests,
        tool_calls=by_key(corpus.tool_calls),
        turns=turns,
        calls=None,
    )


def _within_days(column: str, since: date | None, until: date | None) -> pl.Expr:
    """``column`` (a timestamp) falls on a UTC day in [since, until]; an open end is not checked."""
    day = pl.col(column).dt.date()
    cond = pl.lit(True)
    if since:
        cond = cond & (day >= since)
    if until:
        cond = cond & (day <= until)
    return cond


def _agg_requests(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    return (
        df.group_by(keys)
        .agg(
            pl.col("session_key").n_unique().alias("sessions"),
            pl.len().alias("requests"),
            *[pl.col(k).sum() for k in TOKEN_COLUMNS],
            pl.col("input").max().alias("peak_context"),
            *cost_aggs(),
            pl.col("tool_calls").sum(),
        )
        .with_columns(
            *known_cost(),
            cache_ratio=cache_ratio_expr(),
        )
        .drop("_priced")
        .sort(keys)
    )


def _marked(rows: pl.DataFrame, corpus: Corpus) -> pl.DataFrame:
    """Turn or request ``rows`` with their session's ctxtool marks (``derived_from``: a compacted copy;
    ``compacted_at``: compacted in place), so that a copy's rows read apart from its original's."""
    marks = corpus.sessions.select("session_key", "derived_from", "compacted_at")
    return rows.join(marks, on="session_key", how="left", maintain_order="left")


def report(
    corpus: Corpus, by: str, *, include_subagents_in_parent: bool = True, timezone: str | None = None
) -> pl.DataFrame:
    """The rows of ``ctxtool stats --by BY``. ``timezone`` (an IANA name; default UTC) decides which day,
    week (the date of its Monday, as ccusage shows it) or month (``YYYY-MM``) a request falls in."""
    if by not in BY_CHOICES:
        raise ValueError(f"by must be one of {', '.join(BY_CHOICES)}")
    if by == "turn":
        df = _marked(corpus.turns.sort("session", "session_key", "turn"), corpus)
    elif by == "request":
        df = _marked(corpus.requests.sort("session", "session_key", "position"), corpus)
    elif by == "session":
        df = _session_report(corpus, include_subagents_in_parent)
    elif by == "model":
        df = _agg_requests(corpus.requests.with_columns(pl.col("model").fill_null("(unknown)")), ["model"])
    elif by == "project":
        df = _agg_requests(corpus.requests, ["project"])
    elif by in ("user", "machine"):  # the sessions' own (a dataset's), else this machine's
        from ctxtool.common.identity import identity

        local = getattr(identity(), by)
        who = corpus.sessions.select("session_key", by) if by in corpus.sessions.columns else None
        req = corpus.requests
        req = (
            req.join(who, on="session_key", how="left").with_columns(pl.col(by).fill_null(local))
            if who is not None
            else req.with_columns(pl.lit(local).alias(by))
        )
        df = _agg_requests(req, [by])
    else:
        local = pl.col("ts").dt.convert_time_zone(timezone) if timezone else pl.col("ts")
        key = {
            "day": local.dt.date(),
            "week": local.dt.truncate("1w").dt.date(),  # polars weeks start on Monday
            "month": local.dt.strftime("%Y-%m"),
        }[by]
        df = _agg_requests(corpus.requests.with_columns(key.alias(by)), [by])
    return df.select(REPORT_COLUMNS[by])


def with_uncached_input(df: pl.DataFrame) -> pl.DataFrame:
    """The token columns as ccusage shows them: ``input`` without the cached tokens, so that ``input``,
    ``cached``, ``output``, ``thoughts`` and ``tool`` add up to ``total``; Gemini's own prompt count (cached
    included, what the context holds) stays as ``prompt_tokens``. What ``ctxtool stats`` prints and writes;
    the frames themselves keep Gemini CLI's names and meanings. ``ctxtool.measure.tokens.report_tokens`` is
    the same rule on one recorded response (``diff``)."""
    if "input" not in df.columns or "cached" not in df.columns:
        return df
    at = df.columns.index("cached") + 1
    df = df.with_columns(
        pl.col("input").alias("prompt_tokens"),
        (pl.col("input") - pl.col("cached").fill_null(0)).alias("input"),
    )
    order = [c for c in df.columns if c != "prompt_tokens"]
    return df.select([*order[:at], "prompt_tokens", *order[at:]])


# What a subagent session adds to its parent's row (cost too, see _session_report). Its turns go with its
# requests: every request is in a counted turn, and the rows of `--by session` count the turns `--by turn`
# lists (a subagent's under its own name).
_ROLLED_UP = (*TOKEN_COLUMNS, "requests", "turns", "tool_calls", "tool_errors", "unpriced")


def _session_report(corpus: Corpus, roll_up: bool) -> pl.DataFrame:
    s = corpus.sessions
    if corpus.requests.height != _request_count(s):
        # Filtered: every column a session row takes of its requests, and the ratios of them, again from the
        # requests the filter kept (``sessions.request_aggs``), never the whole history's.
        sums = corpus.requests.group_by("session_key").agg(*request_aggs())
        s = (
            s.drop(*(c for c in REQUEST_COLUMNS if c in s.columns), "context_share", "cache_ratio")
            .join(sums, on="session_key", how="left", maintain_order="left")
            .with_columns(*request_fills())
            .with_columns(*known_cost(), **derived_from_sums())
            .drop("_priced")
        )
    if not roll_up:
        return s.sort("start", "session", "session_key", nulls_last=True)
    # Subagent sessions are attributed to their parent: their tokens and cost are added to the parent's row.
    # A subagent whose parent the filters left out keeps a row of its own: its requests still count.
    child = s.filter(
        pl.col("parent_session_key").is_not_null()
        & pl.col("parent_session_key").is_in(s.get_column("session_key").implode())
    )
    if child.height == 0:
        return s.sort("start", "session", "session_key", nulls_last=True)
    child_keys = child.get_column("session_key").implode()
    add = child.group_by("parent_session_key").agg(
        *[pl.col(k).sum().alias(f"_sub_{k}") for k in _ROLLED_UP],
        pl.col("cost").sum().alias("_sub_cost"),
    )
    parents = (
        s.filter(pl.col("session_key").is_in(child_keys).not_())
        .join(add, left_on="session_key", right_on="parent_session_key", how="left", maintain_order="left")
        .with_columns(
            *[(pl.col(k) + pl.col(f"_sub_{k}").fill_null(0)).alias(k) for k in _ROLLED_UP],
            # The known parts add up; null only when requests were made and none has a known price.
            cost=pl.when(
                (
                    pl.col("requests") + pl.col("_sub_requests").fill_null(0)
                    == pl.col("unpriced") + pl.col("_sub_unpriced").fill_null(0)
                )
                & (pl.col("unpriced") + pl.col("_sub_unpriced").fill_null(0) > 0)
            )
            .then(None)
            .otherwise(pl.col("cost").fill_null(0.0) + pl.col("_sub_cost").fill_null(0.0)),
        )
        .with_columns(cache_ratio=derived_from_sums()["cache_ratio"])
        .drop([c for c in add.columns if c != "parent_session_key"])
    )
    return parents.sort("start", "session", "session_key", nulls_last=True)


def _request_count(sessions: pl.DataFrame) -> int:
    return int(sessions.get_column("requests").sum() or 0) if sessions.height else 0


def totals(df: pl.DataFrame) -> dict[str, Any]:
    """A totals row for a report: sums of the additive columns, max of the peaks (``shape.totals_of``)."""
    return totals_of(df.columns, lambda col: df.get_column(col).to_list())


def live_only(corpus: Corpus) -> Corpus:
    """The live view: only requests and turns still in the history Gemini CLI would resume."""
    requests = corpus.requests.filter(pl.col("live"))
    messages = corpus.messages.filter(pl.col("live"))
    turns = turns_frame(messages, requests, corpus.sessions)
    # Every column a session row takes of its requests, and the ratios of them, from the live requests
    # (``sessions.request_aggs``): none keeps a figure of the whole history.
    meta = corpus.sessions.drop(*(c for c in REQUEST_COLUMNS if c in corpus.sessions.columns))
    sums = requests.group_by("session_key").agg(*request_aggs())
    sessions = (
        meta.join(sums, on="session_key", how="left", maintain_order="left")
        .with_columns(*request_fills())
        .with_columns(*known_cost(), **derived_from_sums())
        .drop("_priced")
    )
    sessions = with_turn_counts(sessions, turns)  # the turns still live, as `--by turn --live` lists them
    return replace(
        corpus,
        sessions=sessions,
        messages=messages,
        requests=requests,
        tool_calls=corpus.tool_calls.filter(pl.col("live").fill_null(True)),
        turns=turns,
        calls=None,
    )


def hidden_calls(corpus: Corpus) -> tuple[int, float]:
    """Gemini CLI's unrecorded compression calls over the corpus's sessions: (requests, estimated cost)."""
    s = corpus.sessions
    if s.height == 0 or "hidden_requests" not in s.columns:
        return 0, 0.0
    return int(s.get_column("hidden_requests").sum() or 0), float(s.get_column("hidden_cost").sum() or 0.0)


def read_warnings(corpus: Corpus) -> list[str]:
    """What a command reading ``corpus`` should warn about: files that could not be read, files with broken
    lines, and the corpus's own warnings (unknown models, unrepresentable values)."""
    return [
        *(str(p) for p in corpus.problems),
        *(broken_lines_warning(*found) for found in broken_files(corpus)),
        *(
            invalid_utf8_warning(r["file"], r["invalid_utf8_lines"], r["first_invalid_utf8_line"])
            for r in corpus.sessions.filter(pl.col("invalid_utf8_lines") > 0).iter_rows(named=True)
        ),
        *([describe_total_mismatches(mismatched)] if (mismatched := total_mismatches(corpus)) else []),
        *corpus.warnings,
    ]


def total_mismatches(corpus: Corpus) -> list[tuple[str, int]]:
    """(file, requests) for every session with requests whose recorded ``total`` is not the sum of its parts
    (``ctxtool.measure.tokens.total_disagrees`` on the requests frame: such a total is kept as recorded)."""
    req = corpus.requests
    if req.height == 0:
        return []
    parts = pl.sum_horizontal(*[pl.col(k).fill_null(0) for k in TOTAL_PARTS])
    counts = (
        req.filter(pl.col("total").fill_null(0) != parts)
        .group_by("session_key")
        .agg(pl.len().alias("n"))
        .join(corpus.sessions.select("session_key", "file"), on="session_key", how="left")
        .sort("file", "session_key", nulls_last=True)
    )
    return [(r["file"] or r["session_key"], int(r["n"])) for r in counts.iter_rows(named=True)]


def broken_files(corpus: Corpus) -> list[tuple[str, int, int, int | None]]:
    """(file, broken lines, first broken line, first line over the record limit) for every session that had
    unparseable lines."""
    df = corpus.sessions.filter(pl.col("broken_lines") > 0)
    return [
        (r["file"], r["broken_lines"], r["first_broken_line"] or 0, r["first_overlong_line"])
        for r in df.iter_rows(named=True)
    ]


def read_summary(corpus: Corpus) -> dict[str, Any]:
    """What was read, for the JSON envelope and the table caption."""
    s = corpus.sessions
    return summary(
        files=corpus.files_read,
        size=corpus.bytes_read,
        sessions=s.height,
        subagent_sessions=s.filter(pl.col("kind") == "subagent").height if s.height else 0,
        requests=corpus.requests.height,
        total_tokens=int(corpus.requests.get_column("total").sum() or 0),
        broken_lines=corpus.broken_lines,
        invalid_utf8_lines=int(s.get_column("invalid_utf8_lines").sum() or 0) if s.height else 0,
        total_mismatches=sum(n for _, n in total_mismatches(corpus)),
        skipped=corpus.skipped,
        problems=corpus.problems,
    )
