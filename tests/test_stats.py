"""ctxtool.stats: the report ``ctxtool stats`` prints, as a value a script can ask for."""

from __future__ import annotations

import pytest

from ctxtool import frames
from ctxtool.common.errors import UsageError
from ctxtool.frames.loading import CacheUse
from ctxtool.frames.model import Corpus
from ctxtool.stats import StatsQuery, StatsReport, stats_report
from tests.conftest import FIXTURES

ROOT = FIXTURES / "gemini" / "tmp"  # 15 sessions (one a subagent), one file with a broken line
ONE = ROOT / "ctxdemo" / "chats" / "session-2026-05-25T09-30-c4e5f6a7.jsonl"


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return frames.load([ROOT])


def _report(corpus: Corpus, query: StatsQuery) -> tuple[StatsReport, list[str]]:
    heard: list[str] = []
    return stats_report(corpus, query, warn=heard.append), heard


def test_the_default_report_is_by_turn_for_one_session_else_by_session(corpus: Corpus) -> None:
    many, heard = _report(corpus, StatsQuery())
    assert (many.by, many.single_session, many.sessions_read) == ("session", False, 15)
    assert many.rows.height == 14  # the subagent rolls up into its parent
    assert len(heard) == 1
    assert "skipped 1 broken line" in heard[0]
    # The filters come first: one session left is reported by turn; the warnings are of what is left.
    one, heard = _report(corpus, StatsQuery(filters={"sessions": ("c4e5f6a7",)}))
    assert (one.by, one.single_session, one.sessions_read) == ("turn", True, 15)
    assert [s.row["file"] for s in one.tally.sessions] == [str(ONE)]
    assert heard == []


def test_limit_shows_the_first_rows_and_the_totals_count_every_row(corpus: Corpus) -> None:
    full, _ = _report(corpus, StatsQuery())
    top, _ = _report(corpus, StatsQuery(sort="total", desc=True, limit=3))
    totals = sorted(full.rows.get_column("total").to_list(), reverse=True)
    assert top.rows.get_column("total").to_list() == totals[:3]
    assert (top.limited, full.limited) == (True, False)
    assert top.all_rows.height == full.rows.height == 14
    assert top.totals() == pytest.approx(full.totals())  # the same sum, added in another order
    assert top.totals()["total"] == sum(totals)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (StatsQuery(sort="nope"), "--sort 'nope' is not a column of --by session"),
        (StatsQuery(by="session", top=3), "--top and --by are two reports"),
    ],
)
def test_what_reading_met_is_heard_before_a_usage_error(
    corpus: Corpus, query: StatsQuery, message: str
) -> None:
    heard: list[str] = []
    with pytest.raises(UsageError, match=message):
        stats_report(corpus, query, warn=heard.append)
    assert len(heard) == 1
    assert "skipped 1 broken line" in heard[0]


def test_top_and_the_read_summary(corpus: Corpus) -> None:
    top, _ = _report(corpus, StatsQuery(top=2))
    assert top.by == "top"
    assert top.rows.height > 0
    assert set(top.rows.get_column("rank").to_list()) == {1, 2}
    summary = top.read_summary(CacheUse(enabled=True, files_cached=4, files_parsed=12))
    assert summary["sessions"] == 15
    assert summary["index"] == {
        "enabled": True,
        "corpus_from_cache": False,
        "files_from_index": 4,
        "files_resumed": 0,
        "files_parsed": 12,
    }
