"""Assembling a ``Corpus``: find and read the files, measure them with the engine (``frames.tally``) and
build the frames of its columns (``frames.corpus``). Never prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxtool.frames.model import Corpus, Progress
    from ctxtool.session.columns import FileColumns
    from ctxtool.session.discover import Discovery


def load(
    paths: Sequence[str | Path],
    *,
    subagents: bool = True,
    progress: Progress | None = None,
    workers: int | None = None,
) -> Corpus:
    """Find, read and flatten every session under ``paths`` into frames."""
    from ctxtool.session.discover import discover
    from ctxtool.session.scan import read_files

    found = discover(paths, subagents=subagents)
    results = read_files(found.files, progress=progress, workers=workers)
    return build_corpus(results, found, subagents=subagents)


def warm_up(*, price_memo: bool = True) -> None:
    """Load what building frames needs (price data), so it can overlap with parsing."""
    from ctxtool.measure.pricing import warm_up as warm_prices

    warm_prices(memo=price_memo)


def build_corpus(
    results: list[FileColumns], found: Discovery | None = None, *, subagents: bool = True
) -> Corpus:
    """The frames of the sessions of ``results``. ``subagents=False`` leaves out every subagent session."""
    from ctxtool.frames.corpus import corpus_of
    from ctxtool.frames.tally import tally
    from ctxtool.measure.pricing import covering

    return corpus_of(tally(results, found, covering(None), subagents=subagents, detail=True), results, found)
