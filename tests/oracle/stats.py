"""``stats``' reports as the frames made them (the oracle's ``stats_report``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

from ctxtool.common.errors import UsageError, use_one_of
from ctxtool.frames.model import Corpus
from ctxtool.frames.reading import Problem
from ctxtool.stats import StatsQuery, with_index
from tests.oracle.query import (
    filter_corpus,
    hidden_calls,
    live_only,
    read_summary,
    read_warnings,
    report,
    totals,
    with_uncached_input,
)


@dataclass
class OracleReport:
    corpus: Corpus
    by: str
    rows: pl.DataFrame
    all_rows: pl.DataFrame
    sessions_read: int
    single_session: bool

    def totals(self) -> dict[str, Any]:
        sums = totals(self.all_rows)
        if "sessions" in sums:
            sums["sessions"] = self.corpus.requests.get_column("session_key").n_unique()
        return sums

    def read_summary(self, use: Any) -> dict[str, Any]:
        return with_index(read_summary(self.corpus), use)

    def hidden_calls(self) -> tuple[int, float]:
        return hidden_calls(self.corpus)

    @property
    def problems(self) -> list[Problem]:
        return self.corpus.problems

    @property
    def broken_lines(self) -> int:
        return self.corpus.broken_lines


def stats_report(corpus: Corpus, query: StatsQuery, *, warn: Callable[[str], None]) -> OracleReport:
    sessions_read = corpus.sessions.height
    corpus = filter_corpus(corpus, **query.filters)
    if query.live:
        corpus = live_only(corpus)
    for warning in read_warnings(corpus):
        warn(warning)
    single = corpus.sessions.filter(corpus.sessions["parent_session_key"].is_null()).height == 1
    by = query.by or ("turn" if single else "session")
    rows = with_uncached_input(
        report(corpus, by, include_subagents_in_parent=query.subagents, timezone=query.timezone)
    )
    if not query.show_secrets and "prompt" in rows.columns:
        from ctxtool.common.secret_scan import redact

        texts = [None if t is None else redact(t) for t in rows.get_column("prompt").to_list()]
        rows = rows.with_columns(pl.Series("prompt", texts, dtype=pl.String))
    if query.sort:
        if query.sort not in rows.columns:
            raise UsageError(
                f"--sort {query.sort!r} is not a column of --by {by}", use_one_of(query.sort, rows.columns)
            )
        rows = rows.sort(query.sort, descending=query.desc, nulls_last=True, maintain_order=True)
    shown = rows.head(query.limit) if query.limit else rows
    return OracleReport(corpus, by, shown, rows, sessions_read, single)
