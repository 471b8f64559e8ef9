"""Every report under every filter, ``--live``, ``--timezone`` and ``--sort`` is made in plain Python
(``ctxtool.frames.views`` over the tally), and is what the frames make of the same files.

The frames (``stats_report`` over ``build_corpus``) are the oracle here: each home is read once, and for
each query both make the report; the columns, every value of every row (costs to the last bits an order of
summing can change), the totals, the read summary, the warnings and the usage errors must agree. Homes: the
fixtures, what Gemini CLI 0.61.0 wrote, the 43 real sessions, and generated homes.
"""

from __future__ import annotations

import copy
import math
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from ctxtool.frames import tally as T
from ctxtool.frames.loading import CacheUse
from ctxtool.measure.pricing import price_table
from ctxtool.session.discover import discover
from ctxtool.session.scan import read_files
from ctxtool.stats import StatsQuery, tally_report
from tests.conftest import FIXTURES, REAL_SESSIONS
from tests.oracle.build import build_corpus
from tests.oracle.stats import stats_report
from tests.test_tally import RECORDED, homes

BYS = ["turn", "request", "session", "model", "project", "day", "week", "month", None]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
    return bool(a == b)


def _queries(made: T.Tally, *, every: bool) -> list[StatsQuery]:
    """Queries over every grain, with filters drawn from what the home holds (its days, ids, projects):
    ``every`` query of each grain, or one a grain, in turn."""
    days = sorted({t[:10] for s in made.sessions for t in (s.requests.times if s.requests else []) if t})
    ids = [s.row["session_id"] for s in made.sessions if s.row["session_id"]]
    projects = sorted({s.row["project"] for s in made.sessions})
    mid = date.fromisoformat(days[len(days) // 2]) if days else date(2026, 2, 1)
    early = date.fromisoformat(days[len(days) // 4]) if days else date(2025, 1, 1)
    out = []
    for by in BYS:
        out += [
            StatsQuery(by=by),
            StatsQuery(by=by, live=True),
            StatsQuery(by=by, subagents=False),
            StatsQuery(by=by, filters={"since": mid}),
            StatsQuery(by=by, filters={"until": mid}, live=True),
            StatsQuery(
                by=by, filters={"since": early, "until": mid, "models": ["gemini-2.5-pro", "gemini-3"]}
            ),
            StatsQuery(by=by, filters={"models": ["gemini-2.5"]}, live=True),
            StatsQuery(by=by, filters={"projects": projects[:1]}),
            StatsQuery(by=by, timezone="Pacific/Auckland", filters={"until": mid}),
            StatsQuery(by=by, timezone="America/Los_Angeles"),
            StatsQuery(by=by, sort="input", desc=True, limit=3),
            StatsQuery(by=by, sort="cost"),
            StatsQuery(by=by, sort="no-such-column"),
        ]
        if ids:
            out += [
                StatsQuery(by=by, filters={"sessions": [ids[0][:6], ids[-1]]}),
                StatsQuery(by=by, filters={"sessions": [ids[len(ids) // 2][:1]]}),  # ambiguous, mostly
                StatsQuery(by=by, filters={"sessions": ["no-such-session"]}),
            ]
    if every:
        return out
    per = len(out) // len(BYS)
    return [out[i * per + (i * 5) % per] for i in range(len(BYS))] + out[-per : -per + 4]


def _report(make: Any, query: StatsQuery) -> tuple[Any, list[str]]:
    heard: list[str] = []
    try:
        return make(query, heard.append), heard
    except Exception as exc:  # a usage error: both must raise the same one
        return exc, heard


def assert_views_agree(root: Path, *, every: bool = True) -> None:
    found = discover([str(root)])
    results = read_files(found.files, workers=1)
    made = T.tally(results, found, price_table, detail=True)
    corpus = build_corpus(copy.deepcopy(results), found)
    for query in _queries(made, every=every):
        plain, heard = _report(lambda q, w: tally_report(made, q, warn=w), query)
        frames, told = _report(lambda q, w: stats_report(corpus, q, warn=w), query)
        if isinstance(frames, Exception) or isinstance(plain, Exception):
            assert (type(plain), str(plain)) == (type(frames), str(frames)), query
            continue
        assert heard == told, query
        assert plain.rows.columns == frames.rows.columns, query
        got, want = plain.rows.to_dicts(), frames.rows.to_dicts()
        assert len(got) == len(want), query
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            for col in w:
                assert _same(g[col], w[col]), (query, i, col, g[col], w[col])
        sums, frames_sums = plain.totals(), frames.totals()
        assert list(sums) == list(frames_sums), query
        for col in frames_sums:
            assert _same(sums[col], frames_sums[col]), (query, "totals", col)
        assert plain.read_summary(CacheUse()) == frames.read_summary(CacheUse()), query
        assert (plain.single_session, plain.sessions_read) == (frames.single_session, frames.sessions_read)


def test_the_fixtures_agree() -> None:
    assert_views_agree(FIXTURES / "gemini" / "tmp")


@pytest.mark.parametrize("scenario", ["compressions", "tools-and-resumes"])
def test_what_gemini_cli_wrote_agrees(scenario: str) -> None:
    assert_views_agree(RECORDED / scenario / "tmp")


def test_the_real_sessions_agree() -> None:
    if not REAL_SESSIONS.is_dir():
        pytest.skip("../shared/real-sessions is absent")
    assert_views_agree(REAL_SESSIONS, every=False)


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(home=homes())
def test_generated_homes_agree(
    tmp_path_factory: pytest.TempPathFactory, home: list[tuple[str, bytes]]
) -> None:
    root = tmp_path_factory.mktemp("home") / "tmp"
    for name, data in home:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert_views_agree(root, every=False)


def test_a_view_of_a_tally_without_columns_is_refused() -> None:
    found = discover([str(FIXTURES / "gemini" / "tmp")])
    made = T.tally(read_files(found.files, workers=1), found, price_table)
    assert tally_report(made, StatsQuery(by="session", live=True), warn=lambda _: None) is None
    assert tally_report(made, StatsQuery(by="session"), warn=lambda _: None) is not None
