"""Find, read and build a corpus, using the incremental index when asked: the one way commands load sessions.

Owns the order of work that makes a scan fast: files are found and worker processes started before anything
heavy is imported; what the index keeps of a file (its columns, the engine's measure of it) is taken instead
of reading it again, and a grown JSONL file is read from where it ended. No frames are kept between runs.
Imports nothing heavy at module level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ctxtool.session.discover import Discovery, default_roots, discover
from ctxtool.session.stamp import cache_root

if TYPE_CHECKING:
    from ctxtool.frames.model import Corpus, Progress
    from ctxtool.frames.tally import Tally
    from ctxtool.session.columns import FileColumns
    from ctxtool.session.index import FileIndex


class CacheUse(msgspec.Struct):
    """How much of a load came from the cache (for the report header)."""

    enabled: bool = False
    corpus_hit: bool = False
    files_cached: int = 0
    files_resumed: int = 0
    files_parsed: int = 0
    notice: str | None = None  # the index held something unusable and was rebuilt (one line for stderr)
    # Each file's size and mtime before reading, when the index now holds every file read: what the next run
    # over unchanged files will find, so its output can be foreseen (``frames.replays``).
    stamps: dict[str, Any] | None = None
    before: dict[str, Any] | None = None  # each file's size and mtime before reading, with the index
    inputs: dict[str, Any] | None = None  # with ``stamps``: what the report was computed from (``inputs_of``)


def load_corpus(
    paths: Sequence[str | Path],
    *,
    subagents: bool = True,
    cache: bool = False,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
) -> tuple[Corpus, CacheUse]:
    """Sessions under ``paths`` (default: Gemini CLI's data root) as frames (``read_tally``, then
    ``frames.corpus``), and how the cache was used."""
    from ctxtool.frames import adoption

    adoption.discard()  # the frames read through the pool
    t, results, found, use = read_tally(
        paths,
        subagents=subagents,
        cache=cache,
        cache_dir=cache_dir,
        progress=progress,
        workers=workers,
        detail=True,
        errand=True,
    )
    _return_free_heap()  # before the frames, built in polars' own allocator
    from ctxtool.frames.corpus import corpus_of  # (polars: after the scan, whose workers fork without it)

    return corpus_of(t, results, found), use


def read_tally(
    paths: Sequence[str | Path],
    *,
    subagents: bool = True,
    cache: bool = False,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
    detail: bool = False,
    requests: bool = True,
    turns_of_one: bool = False,
    errand: bool = False,
) -> tuple[Tally, list[FileColumns], Discovery, CacheUse]:
    """The engine's tally of the sessions under ``paths``, the files read and how the index served them: the
    one way every command reads sessions. Each file is measured (and priced) where it is read, and the
    measure kept in the index beside it. ``turns_of_one``: the columns too when one session is read (its
    default report is by turn). ``errand``: on two cores, the one worker loads genai-prices' data when the
    rates must come from it (``scan.Errand``), so this process never holds it."""
    from functools import partial

    from ctxtool.frames import tally

    measured: dict[str, tally.Measured | None] = {}
    index = None
    if cache:
        from ctxtool.session.index import FileIndex

        index = FileIndex(cache_root(cache_dir), rows=False)
    worker_rates = _errand() if errand else None
    results, found, use = read_plain(
        paths,
        subagents=subagents,
        cache=cache,
        cache_dir=cache_dir,
        progress=progress,
        then=tally.count_and_price,  # in the process that read the file
        kept=measured,
        index=index,
        workers=workers,
        errand=worker_rates,
    )
    # The measures the index keeps of the files it served unchanged, added to ``measured``; each with the
    # rates it was priced at.
    kept: dict[str, Any] = {}
    if index is not None and use.before is not None:
        kept = {p: m for p, m in tally.kept_measures(index, use.before).items() if p not in measured}
        measured.update(kept)
    kept = {p: (m, m.priced_at) for p, m in kept.items()}

    def rows(files: Sequence[FileColumns]) -> None:
        if index is not None:
            fill_rows(files, found, index, use, then=tally.count_and_price, kept=measured)

    from ctxtool.measure.pricing import PriceTable, covering

    resolved = worker_rates.result if worker_rates is not None else None
    rates = covering(resolved if isinstance(resolved, PriceTable) else None)
    made = partial(tally.tally, results, found, rates, subagents=subagents, measured=measured, rows=rows)
    t = made(requests=requests, detail=detail)
    if not detail and turns_of_one and sum(s.parent_key is None for s in t.sessions) == 1:
        t = made(detail=True)
    if index is not None:
        if use.before is not None:
            # Keep the measures that are new: of a file read, or priced again (in place, by the tally) at
            # other rates than ``kept`` says the index held them at.
            new = {
                p: m
                for p, m in measured.items()
                if m is not None and (p not in kept or m is not kept[p][0] or m.priced_at != kept[p][1])
            }
            tally.keep_measures(index, use.before, new)
        index.close()
    return t, results, found, use


def _errand() -> Any:
    """What the one worker of a scan does beside its files (``scan.Errand``): resolve the rates."""
    from functools import partial

    from ctxtool.measure import pricing
    from ctxtool.session.scan import Errand

    def models(measures: list[Any]) -> list[str]:  # (what count_and_price made of each file read)
        return sorted({name for m in measures if m is not None for name in m.seen})

    warm, table = partial(pricing.warm_up, memo=True), partial(pricing.price_table, memo=True)
    return Errand(warm, table, models, repays_a_worker=not pricing.rates_memoised(True))


def read_plain(
    paths: Sequence[str | Path],
    *,
    subagents: bool = True,
    cache: bool = False,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    then: Callable[[FileColumns], object] | None = None,
    kept: dict[str, Any] | None = None,
    index: FileIndex | None = None,
    workers: int | None = None,
    errand: Any = None,
) -> tuple[list[FileColumns], Discovery, CacheUse]:
    """The files under ``paths`` read (through the per-file index when ``cache``: ``index``, by default
    ``cache_dir``'s), without building frames (``then`` and ``kept`` as ``read_files`` takes them). An index
    opened with ``rows=False`` serves files without their rows: ``fill_rows`` adds them where needed."""
    from ctxtool.frames import adoption
    from ctxtool.session.scan import read_files

    started = adoption.take(then)  # begun before the command was parsed, if it was
    targets = [str(p) for p in paths] or [str(root) for root in default_roots()]
    # What it found, when it looked where this run looks: the same discovery, made while this process started.
    found = (started.discovery(targets, subagents) if started is not None else None) or discover(
        targets, subagents=subagents
    )
    use = CacheUse(enabled=cache)
    if not cache:
        index = None
    elif index is None:
        from ctxtool.session.index import FileIndex

        index = FileIndex(cache_root(cache_dir))
    stamps: dict[str, list[int] | None] = {}  # (those the scan takes: file_stamps would stat each file again)
    results = read_files(
        found.files,
        progress=progress,
        index=index,
        then=then,
        kept=kept,
        stamped=stamps,
        started=started,
        workers=workers,
        errand=errand,
    )
    if index is None:
        use.files_parsed = len(results)
        return results, found, use
    use.files_cached, use.files_resumed, use.files_parsed = index.hits, index.resumed, index.parsed
    use.notice = index.notice()
    use.corpus_hit = bool(results) and index.hits == len(found.files) and use.notice is None
    use.before = stamps
    if not index.failed and all(not r.error for r in results):
        from ctxtool.frames.replays import inputs_of

        use.stamps = stamps
        use.inputs = inputs_of(targets, subagents, found, stamps)
    return results, found, use


def fill_rows(
    files: Sequence[FileColumns],
    found: Discovery,
    index: FileIndex,
    use: CacheUse,
    *,
    then: Callable[[FileColumns], object] | None = None,
    kept: dict[str, Any] | None = None,
) -> None:
    """Give ``files``, of a ``read_plain`` through ``index`` (``rows=False``), the rows that index served
    them without. A file whose rows it cannot give is read again, into the same ``FileColumns``, and ``use``
    counts it as an entry the lookup could not use."""
    if not (unusable := index.fill(files)):
        return
    from ctxtool.session.columns import FileColumns
    from ctxtool.session.scan import read_files

    by_path = {str(sp.path): sp for sp in found.files}
    index.forget(fc.path for fc in unusable)
    again = read_files([by_path[fc.path] for fc in unusable], workers=1, index=index, then=then, kept=kept)
    for old, new in zip(unusable, again, strict=True):
        for name in FileColumns.__struct_fields__:
            setattr(old, name, getattr(new, name))
    use.files_cached, use.files_resumed, use.files_parsed = index.hits, index.resumed, index.parsed
    use.notice = index.notice()
    use.corpus_hit = False
    if index.failed or any(fc.error for fc in again):
        use.stamps = use.inputs = None  # as read_plain leaves them when the index misses a file read


def _return_free_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing).

    Reading leaves this process's heap about 15 MB larger than what it holds, and polars' allocator never
    reuses it: returning it lowered the peak of a first run on the bench corpus from 187-194 to 174-187 MB."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)
