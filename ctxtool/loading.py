"""Find, read and build a corpus, using the incremental index when asked: the one way commands load sessions.

Owns the order of work that makes a cold scan fast: files are found and worker processes started *before*
polars is imported (workers are forked from a lean process), the frames module and price data load while the
workers parse, and an unchanged corpus is loaded straight from the frames stored for its fingerprint.
Imports nothing heavy at module level.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ctxtool.session.discover import SessionPath, default_root, discover
from ctxtool.session.index import FileIndex, cache_root, fingerprint
from ctxtool.session.scan import read_files

if TYPE_CHECKING:
    from ctxtool.frames import Corpus

Progress = Callable[[int, int], None]


@dataclass(slots=True)
class CacheUse:
    """How much of a load came from the cache (for the report header)."""

    enabled: bool = False
    corpus_hit: bool = False
    files_cached: int = 0
    files_resumed: int = 0
    files_parsed: int = 0


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
    found = discover(paths or [str(default_root())], subagents=subagents)
    use = CacheUse(enabled=cache)
    root = cache_root(cache_dir) if cache else None
    key = ""
    if root is not None:
        stats: list[tuple[SessionPath, os.stat_result | None]] = []
        for sp in found.files:
            try:
                stats.append((sp, os.stat(sp.path)))
            except OSError:
                stats.append((sp, None))
        today = datetime.now(tz=UTC).date().isoformat()  # prices are dated
        key = fingerprint(stats, subagents, found.skipped, found.missing, found.empty_dirs, today)
        if (root / "corpus" / key / "meta.json").exists():
            from ctxtool import frames

            corpus = frames.load_corpus_cache(root, key)
            if corpus is not None:
                use.corpus_hit = True
                use.files_cached = corpus.files_found
                return corpus, use

    def warm() -> None:
        from ctxtool import frames

        frames.warm_up(price_memo=cache)

    index = FileIndex(root) if root is not None else None
    results = read_files(found.files, progress=progress, workers=workers, while_waiting=warm, index=index)
    if index is not None:
        use.files_cached, use.files_resumed, use.files_parsed = index.hits, index.resumed, index.parsed
    else:
        use.files_parsed = len(results)
    from ctxtool import frames

    # Without the cache, prices come straight from genai-prices too (a truly cold run).
    corpus = frames.build_corpus(results, found, price_memo=cache)
    if root is not None:
        frames.save_corpus_cache(corpus, root, key)
    return corpus, use
