"""Find, read and build a corpus, using the incremental index when asked: the one way commands load sessions.

Owns the order of work that makes a scan fast:

* cold: files are found and worker processes started *before* polars is imported (workers are forked from
  a lean process); this process imports the frames module while they parse, then parses beside them. The
  price data loads here too, unless one worker was started (2 cores): that worker loads it and resolves the
  rates of the models read, so that this process never holds it;
* warm: the frames built by the previous run over the same PATH arguments are stored with each file's size
  and modification time; when nothing changed they are loaded as they are;
* a few files changed (Gemini CLI appended to a session): only the sessions those files belong to are read
  again (a grown JSONL file from where it ended, through the per-file index) and spliced into the stored
  frames; parent links and totals are recomputed over the whole, so the result equals a full build.

Imports nothing heavy at module level.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ctxtool.common.digest import blake2b
from ctxtool.session import stamp
from ctxtool.session.discover import Discovery, default_roots, discover, file_stamps
from ctxtool.session.stamp import cache_root

if TYPE_CHECKING:
    from ctxtool.frames.messages import Rows
    from ctxtool.frames.model import Corpus
    from ctxtool.frames.store import Stored
    from ctxtool.session.columns import FileColumns
    from ctxtool.session.index import FileIndex

Progress = Callable[[int, int], None]

# Splice at most this many changed files (or 5% of the scan, if more); past that a full build is as quick.
_SPLICE_MAX_FILES = 16


class CacheUse(msgspec.Struct):
    """How much of a load came from the cache (for the report header)."""

    enabled: bool = False
    corpus_hit: bool = False
    files_cached: int = 0
    files_resumed: int = 0
    files_parsed: int = 0
    notice: str | None = None  # the index held something unusable and was rebuilt (one line for stderr)
    # Each file's size and mtime before reading, when the index now holds every file read (``read_plain``):
    # what the next run over unchanged files will find, so its output can be foreseen (``frames.replays``).
    stamps: dict[str, Any] | None = None
    # Each file's size and mtime before reading (``read_plain`` with the index): what was read is of them.
    before: dict[str, Any] | None = None
    # With ``stamps``: what the report was computed from, as ``frames.replays`` keys a replay (``inputs_of``).
    inputs: dict[str, Any] | None = None


def load_corpus(
    paths: Sequence[str | Path],
    *,
    subagents: bool = True,
    cache: bool = False,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
) -> tuple[Corpus, CacheUse]:
    """Sessions under ``paths`` (default: Gemini CLI's data root) as frames, and how the cache was used."""
    targets = [str(p) for p in paths] or [str(root) for root in default_roots()]
    from ctxtool.frames import adoption

    adoption.discard()  # the frames read through the pool
    found = discover(targets, subagents=subagents)
    use = CacheUse(enabled=cache)
    if not cache:
        # Without the index every file is read again. The shipped rates and the memo of resolved price
        # rates (functions of the installed genai-prices and the day, not of the sessions) still apply; set
        # CTXTOOL_NO_PRICE_CACHE=1 to bypass them too.
        return _full(found, None, progress, workers, use, price_memo=True, subagents=subagents), use

    root = cache_root(cache_dir)
    folder = root / "corpus" / _scan_key(targets, subagents)
    stamps = file_stamps(found)
    today = datetime.now(tz=UTC).date().isoformat()  # prices are dated
    extras = [[str(p), why] for p, why in found.skipped], found.missing, [str(d) for d in found.empty_dirs]
    state = _read_state(folder)
    corpus = None
    stored: Stored | None = None
    changed_keys: frozenset[str] | None = None
    if state is not None and state["day"] == today and state["extras"] == json.loads(json.dumps(extras)):
        old: dict[str, dict[str, Any]] = state["files"]
        changed = {p for p in stamps.keys() | old.keys() if stamps.get(p) != (old.get(p) or {}).get("stamp")}
        if len(changed) <= max(_SPLICE_MAX_FILES, len(stamps) // 20):
            from ctxtool.frames import store

            loaded = store.load(folder, state.get("store"))
            if loaded is not None and not changed:
                use.corpus_hit = True
                use.files_cached = len(stamps)
                return loaded[0], use
            if loaded is not None:
                cached, stored = loaded
                corpus, changed_keys = _splice(cached, found, old, changed, root, use, subagents=subagents)
    if corpus is None:
        corpus = _full(found, root, progress, workers, use, price_memo=True, subagents=subagents)
        stored = None
    replaced = state.get("store") if state is not None else None
    _save(corpus, folder, stamps, today, extras, previous=stored, changed=changed_keys, replaced=replaced)
    return corpus, use


def read_plain(
    paths: Sequence[str | Path],
    *,
    subagents: bool = True,
    cache: bool = False,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    then: Callable[[FileColumns], object] | None = None,
    kept: dict[str, object] | None = None,
    index: FileIndex | None = None,
) -> tuple[list[FileColumns], Discovery, CacheUse]:
    """The files under ``paths`` read (through the per-file index when ``cache``: ``index``, by default
    ``cache_dir``'s), without building frames: what ``stats`` counts without polars (``ctxtool.frames.tally``;
    ``then`` and ``kept`` as ``read_files`` takes them). When the index served every file, the ``CacheUse``
    says so as a warm ``load_corpus`` does (``corpus_hit``), for the same caption. An index opened with
    ``rows=False`` serves files without their rows: ``fill_rows`` adds them to those that need them."""
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
        found.files, progress=progress, index=index, then=then, kept=kept, stamped=stamps, started=started
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
    kept: dict[str, object] | None = None,
) -> None:
    """Give ``files``, of a ``read_plain`` through ``index`` (``rows=False``), the rows that index served
    them without. A file whose rows it cannot give (damaged, not its own) is read again, into the same
    ``FileColumns`` (``then`` and ``kept`` as ``read_plain`` took them), and ``use`` counts and says so as it
    does an entry the lookup could not use."""
    unusable = index.fill(files)
    if not unusable:
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


def _scan_key(targets: Sequence[str], subagents: bool) -> str:
    """One stored corpus per set of PATH arguments (as absolute paths) and options."""
    h = blake2b(digest_size=16)
    h.update(
        repr(
            (stamp.STAMP, sorted(os.path.abspath(os.path.expanduser(t)) for t in targets), subagents)
        ).encode()
    )
    return h.hexdigest()


def _full(
    found: Discovery,
    root: Path | None,
    progress: Progress | None,
    workers: int | None,
    use: CacheUse,
    *,
    price_memo: bool,
    subagents: bool = True,
) -> Corpus:

    from functools import partial

    from ctxtool.measure import pricing
    from ctxtool.session.scan import Errand, read_files

    decoded: list[Rows] = []
    # With one worker beside this process, that worker loads genai-prices' data (when neither the rates
    # shipped in the package nor the day's memo hold today's rates: ``pricing.rates_memoised``) and resolves
    # the rates of the models read: this process never holds that data (about 15 MB less at its peak,
    # building the frames; 0.1 s of its CPU moved to the worker). Loading it repays starting that worker
    # however few files there are to read; when the shipped rates answer, there is nothing to load.
    errand = Errand(
        partial(pricing.warm_up, memo=price_memo),
        partial(pricing.price_table, memo=price_memo),
        lambda: decoded[0].models(),
        repays_a_worker=not pricing.rates_memoised(price_memo),
    )

    def warm() -> None:
        from ctxtool import frames

        if not errand.taken:
            frames.warm_up(price_memo=price_memo)
        decoded.append(frames.Rows())

    def arrived(batch: list[FileColumns]) -> None:
        decoded[0].add(batch)  # while the other workers still parse

    index = None
    if root is not None:  # (without the index, its module and sqlite3 are not even imported)
        from ctxtool.session.index import FileIndex

        index = FileIndex(root)
    results = read_files(
        found.files,
        progress=progress,
        workers=workers,
        while_waiting=warm,
        index=index,
        arrived=arrived,
        errand=errand,
    )
    _return_free_heap()
    if index is not None:
        use.files_cached, use.files_resumed, use.files_parsed = index.hits, index.resumed, index.parsed
        use.notice = index.notice()
    else:
        use.files_parsed = len(results)
    from ctxtool import frames

    prices = errand.result if isinstance(errand.result, pricing.PriceTable) else None
    corpus = frames.build_corpus(
        results,
        found,
        price_memo=price_memo,
        rows=decoded[0] if decoded else None,
        prices=prices,
        subagents=subagents,
    )
    corpus.file_records = _records(results)
    return corpus


def _return_free_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing).

    Reading leaves the heap of this process (which parses files too) about 15 MB larger than what it still
    holds; the frames are built in polars' own allocator, which never reuses it. Returning it lowered the
    peak of a first run on the bench corpus from 187-194 to 174-187 MB (5 alternated runs each, before the
    price data moved to the worker)."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


def _splice(
    cached: Corpus,
    found: Discovery,
    old: dict[str, dict[str, Any]],
    changed: set[str],
    root: Path,
    use: CacheUse,
    *,
    subagents: bool = True,
) -> tuple[Corpus, frozenset[str] | None]:
    """Re-read the sessions the changed files belong to and put them in place of their stored rows.

    Also returns the keys of the sessions whose rows changed (None when others' rows changed too)."""
    from ctxtool import frames

    by_path = {str(sp.path): sp for sp in found.files}
    groups = {by_path[p].group_key for p in changed if p in by_path}
    groups |= {old[p]["group"] for p in changed if p in old}
    again = [sp for sp in found.files if sp.group_key in groups]

    from ctxtool.session.index import FileIndex
    from ctxtool.session.scan import read_files

    index = FileIndex(root)
    results = read_files(again, workers=1, index=index)
    use.files_cached = len(found.files) - len(again) + index.hits
    use.files_resumed, use.files_parsed = index.resumed, index.parsed
    use.notice = index.notice()
    records = {p: r for p, r in old.items() if p in by_path and r["group"] not in groups}
    records.update(_records(results))
    fresh = frames.build_corpus(results, subagents=subagents)
    corpus, keys = frames.splice(cached, fresh, groups)
    _apply_records(corpus, records, found)
    corpus.file_records = records
    return corpus, keys


def _records(results: list[FileColumns]) -> dict[str, dict[str, Any]]:
    """What the totals need to know of each file, kept beside the stored frames."""
    out = {}
    for fc in results:
        # The stamp is filled in from the stat taken before reading (see _save), never after.
        out[fc.path] = {
            "group": fc.group_key,
            "error": fc.error,
            "size": fc.size,
            "broken": fc.broken_lines,
        }
    return out


def _apply_records(corpus: Corpus, records: dict[str, dict[str, Any]], found: Discovery) -> None:
    from ctxtool import frames

    good = [r for r in records.values() if not r["error"]]
    corpus.files_found = len(records)
    corpus.files_read = len(good)
    corpus.bytes_read = sum(r["size"] for r in good)
    corpus.broken_lines = sum(r["broken"] for r in good)
    corpus.problems = [frames.Problem(p, r["error"]) for p, r in records.items() if r["error"]]
    corpus.problems.extend(frames.discovery_problems(found))
    corpus.skipped = [(str(p), why) for p, why in found.skipped]


def _read_state(folder: Path) -> dict[str, Any] | None:
    try:
        state = json.loads((folder / "files.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and {"day", "extras", "files", "store"} <= state.keys() else None


def _save(
    corpus: Corpus,
    folder: Path,
    stamps: dict[str, list[int] | None],
    today: str,
    extras: object,
    *,
    previous: Stored | None,
    changed: frozenset[str] | None,
    replaced: Any,
) -> None:
    """Store the frames (a delta if ``corpus`` was spliced from ``previous``), then the state naming them."""
    from ctxtool.frames import store

    records = getattr(corpus, "file_records", None) or {}
    files = {p: {**records[p], "stamp": stamps.get(p)} for p in records if p in stamps}
    stored = store.save(corpus, folder, previous=previous, changed=changed)
    if stored is None:
        return
    try:
        tmp = folder / f".files.{os.getpid()}.tmp"
        state = {"day": today, "extras": extras, "files": files, "store": stored.names()}
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, folder / "files.json")
    except OSError:
        return
    store.prune(folder, stored, replaced)
