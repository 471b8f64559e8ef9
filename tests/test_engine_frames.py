"""The frames ``ctxtool.load`` returns are built from the engine's columns (``ctxtool.frames.corpus``), and
are the frames the polars derivation built (``tests/oracle``): the same columns, types, rows and values, for
the whole history, under a filter and in the live view.

One difference is the engine's on purpose: under a filter, the tool calls are those of the sessions the
filter keeps (the oracle kept those of every session ``--project`` and ``--session`` kept, whatever the
days and models left of them).
"""

from __future__ import annotations

import copy
import math
from datetime import date
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from ctxtool.frames import tally as T
from ctxtool.frames.corpus import corpus_of, narrowed
from ctxtool.measure.pricing import price_table
from ctxtool.session.discover import discover
from ctxtool.session.scan import read_files
from tests.conftest import FIXTURES, REAL_SESSIONS
from tests.oracle.build import build_corpus
from tests.oracle.query import filter_corpus, live_only
from tests.test_tally import RECORDED

FRAMES = ("sessions", "messages", "requests", "turns", "tool_calls")


def assert_same_frames(got: pl.DataFrame, want: pl.DataFrame, where: str) -> None:
    assert got.columns == want.columns, where
    assert got.schema == want.schema, where
    assert got.height == want.height, where
    for name in want.columns:
        for i, (a, b) in enumerate(
            zip(got.get_column(name).to_list(), want.get_column(name).to_list(), strict=True)
        ):
            if isinstance(a, float) and isinstance(b, float):
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (where, name, i)
            else:
                assert a == b, (where, name, i, a, b)


def assert_frames_agree(root: Path) -> None:
    found = discover([str(root)])
    results = read_files(found.files, workers=1)
    oracle = build_corpus(copy.deepcopy(results), found)
    corpus = corpus_of(T.tally(results, found, price_table, detail=True), results, found)
    for name in FRAMES:
        assert_same_frames(getattr(corpus, name), getattr(oracle, name), name)
    assert corpus.warnings == oracle.warnings
    days = sorted(d for d in oracle.requests.get_column("ts").dt.date().unique().to_list() if d is not None)
    mid = days[len(days) // 2] if days else date(2026, 3, 1)
    cases: list[tuple[dict[str, Any], bool]] = [
        ({"since": mid}, False),
        ({"until": mid}, True),
        ({}, True),
        ({"models": ["gemini-3"]}, False),
        ({"models": ["gemini-2.5"], "since": days[0] if days else mid}, True),
    ]
    for filters, live in cases:
        want = filter_corpus(oracle, **filters)
        if live:
            want = live_only(want)
        got = narrowed(corpus, filters, live=live)
        for name in ("messages", "requests", "turns"):
            assert_same_frames(getattr(got, name), getattr(want, name), f"{name} {filters} live={live}")
        if not filters:
            assert_same_frames(got.tool_calls, want.tool_calls, f"tool_calls live={live}")


def test_the_fixtures_agree() -> None:
    assert_frames_agree(FIXTURES / "gemini" / "tmp")


@pytest.mark.parametrize("scenario", ["compressions", "tools-and-resumes"])
def test_what_gemini_cli_wrote_agrees(scenario: str) -> None:
    assert_frames_agree(RECORDED / scenario / "tmp")


def test_the_real_sessions_agree() -> None:
    if not REAL_SESSIONS.is_dir():
        pytest.skip("../shared/real-sessions is absent")
    assert_frames_agree(REAL_SESSIONS)
