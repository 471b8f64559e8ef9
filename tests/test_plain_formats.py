"""CSV and Parquet of a report the engine made (``ctxtool.frames.tally``, its rows a ``RowTable``) are what
the frames' former derivation writes (the oracle, ``tests/oracle``): the rows become a frame of the dtypes
the column specifications name (``ctxtool.frames.shape.frame_of``), so the same values write the same bytes.

The two compute a few floats differently in their last bits: the engine sums costs exactly (``math.fsum``)
and divides a turn's milliseconds by 1000 exactly, where polars multiplies by the reciprocal. Those columns
(type ``float``) are compared to 1e-12, relative; every other field exactly."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import polars as pl
import pytest

import ctxtool
import ctxtool.stats
from ctxtool.cli import run
from ctxtool.cli.options import filter_args
from ctxtool.common.choices import BY_CHOICES
from ctxtool.frames.shape import SPECS, RowTable
from ctxtool.render.formats import LIST_COLUMNS, encode, frame_of
from ctxtool.stats import StatsQuery, StatsReport, read_report
from tests.conftest import REPO

FLOATS = frozenset(name for name, spec in SPECS.items() if spec.type == "float")


def _close(a: Any, b: Any) -> bool:
    return a == b or (a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-12))


def _stats(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, by: str, fmt: str
) -> tuple[bytes, bytes]:
    """stdout and stderr of ``ctxtool stats fixtures/ --by BY -f FMT --no-cache``, its report made by the
    engine (the frames' report refused)."""
    with monkeypatch.context() as m:

        def refused(*_: object, **__: object) -> None:
            raise AssertionError("the frames made the report")

        m.setattr(ctxtool.stats, "stats_report", refused)
        capsysbinary.readouterr()
        assert run(["stats", "fixtures/", "--by", by, "-f", fmt, "--no-cache"]) == 0
        got = capsysbinary.readouterr()
    return got.out, got.err


def _oracle(by: str, fmt: str) -> tuple[bytes, list[str]]:
    """What the oracle writes of the same report, and its warnings."""
    from ctxtool.session.discover import discover
    from ctxtool.session.scan import read_files
    from tests.oracle.build import build_corpus
    from tests.oracle.stats import stats_report

    found = discover(["fixtures/"])
    heard: list[str] = []
    made = stats_report(
        build_corpus(read_files(found.files, workers=1), found), StatsQuery(by=by), warn=heard.append
    )
    return encode(made.rows, fmt), heard


def _same_csv(engine: bytes, frames: bytes) -> None:
    ours, theirs = (list(csv.reader(io.StringIO(b.decode("utf-8")))) for b in (engine, frames))
    assert ours[0] == theirs[0]
    assert len(ours) == len(theirs) > 1
    for mine, other in zip(ours[1:], theirs[1:], strict=True):
        for column, a, b in zip(ours[0], mine, other, strict=True):
            if column in FLOATS and a and b:
                assert math.isclose(float(a), float(b), rel_tol=1e-12), (column, a, b)
            else:
                assert a == b, (column, a, b)


def _same_parquet(engine: bytes, frames: bytes) -> None:
    ours, theirs = pl.read_parquet(io.BytesIO(engine)), pl.read_parquet(io.BytesIO(frames))
    assert ours.schema == theirs.schema
    assert ours.height == theirs.height > 0
    floats = [c for c in ours.columns if c in FLOATS]
    assert ours.drop(floats).equals(theirs.drop(floats))
    for c in floats:
        pairs = zip(ours[c].to_list(), theirs[c].to_list(), strict=True)
        assert all(_close(a, b) for a, b in pairs), c
    if ours.equals(theirs):
        assert engine == frames  # the same values, the same bytes


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("by", BY_CHOICES)
def test_csv_and_parquet_of_the_engine_are_the_frames(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, by: str, fmt: str
) -> None:
    monkeypatch.chdir(REPO)
    engine = _stats(capsysbinary, monkeypatch, by, fmt)
    frames, warnings = _oracle(by, fmt)
    assert [line for line in engine[1].decode().splitlines() if line.startswith("warning: ")] == [
        f"warning: {w}" for w in warnings
    ]
    (_same_csv if fmt == "csv" else _same_parquet)(engine[0], frames)


@pytest.mark.parametrize("by", BY_CHOICES)
@pytest.mark.parametrize("since", [None, "2099-01-01"], ids=["every-row", "no-row"])
def test_the_rows_make_the_frames_report(monkeypatch: pytest.MonkeyPatch, by: str, since: str | None) -> None:
    """The engine's rows as a frame have the columns and dtypes of the frames' report (``ctxtool.report``,
    which has no ``prompt_tokens``: it is added as the report is written), with rows or without."""
    monkeypatch.chdir(REPO)
    filters = filter_args(since, None, None, None, None)
    engine, _ = read_report(
        ["fixtures/"],
        StatsQuery(by=by, filters=filters),
        cache=False,
        cache_dir=None,
        progress=None,
        warn=lambda _: None,
    )
    assert isinstance(engine, StatsReport)
    assert (engine.rows.height == 0) == (since is not None)
    from tests.oracle.build import load
    from tests.oracle.query import filter_corpus, report

    frames = report(filter_corpus(load(["fixtures/"]), **filters), by)
    ours = dict(frame_of(engine.rows).schema)
    assert ours.pop("prompt_tokens") == pl.Int64
    assert ours == dict(frames.schema)


def test_a_list_column_is_written_as_the_frames_write_it() -> None:
    """``models``: one comma-joined string in CSV, a list in Parquet, none as an empty list."""
    rows = RowTable(
        ["session", "models"], [{"session": "a", "models": "x,y"}, {"session": "b", "models": None}]
    )
    assert "models" in LIST_COLUMNS
    assert encode(rows, "csv") == b'session,models\na,"x,y"\nb,\n'
    back = pl.read_parquet(io.BytesIO(encode(rows, "parquet")))
    assert back.get_column("models").to_list() == [["x", "y"], []]
