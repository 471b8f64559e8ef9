"""The incremental index: what each session file held the last time it was read.

Owns: where ctxtool's cache lives (``--cache-dir`` > ``$CTXTOOL_CACHE_DIR`` > the platform's user cache
directory), the per-file entries (keyed by path, size, modification time and a reader-version stamp), and
the fingerprint of a whole scan. A file whose size and modification time are unchanged is not read again; a
JSONL file that only grew is read from its last complete line (see ``columns.columns_from_file``); a changed
reader version invalidates everything, because the stamp is part of the index file's name.

The index is a pickle in the user's own cache directory, written atomically; a damaged or unreadable index
is ignored (and rebuilt), never fatal. Must not import polars.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path

from ctxtool.session import stamp
from ctxtool.session.columns import FileColumns
from ctxtool.session.discover import SessionPath
from ctxtool.session.stamp import cache_root

__all__ = ["Entry", "FileIndex", "cache_root", "clear"]


@dataclass(slots=True)
class Entry:
    size: int
    mtime_ns: int
    columns: FileColumns


class FileIndex:
    """Per-file results of earlier reads: one small pickle per session file under the cache root.

    One file per entry, so a run that needs a few entries (a grown session) reads only those.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.directory = root / "index" / stamp.STAMP
        self.hits = self.resumed = self.parsed = 0
        self._pending: dict[str, bytes | None] = {}

    def _file(self, path: str) -> Path:
        return self.directory / f"{hashlib.blake2b(path.encode(), digest_size=16).hexdigest()}.pkl"

    def entry(self, path: str) -> Entry | None:
        try:
            with open(self._file(path), "rb") as fh:
                loaded = pickle.load(fh)
        except (
            OSError,
            pickle.UnpicklingError,
            EOFError,
            AttributeError,
            ImportError,
            TypeError,
            ValueError,
        ):
            return None
        if not isinstance(loaded, Entry) or loaded.columns.path != path:
            return None
        return loaded

    def lookup(self, sp: SessionPath, st: os.stat_result) -> tuple[FileColumns | None, FileColumns | None]:
        """(the cached result when the file is unchanged, an earlier result to resume from when it grew)."""
        entry = self.entry(str(sp.path))
        if entry is None:
            return None, None
        if entry.size == st.st_size and entry.mtime_ns == st.st_mtime_ns:
            fc = entry.columns
            # The place on disk may be described differently this time (another PATH argument).
            fc.group_key, fc.project, fc.project_dir, fc.parent_ref = (
                sp.group_key,
                sp.project,
                sp.project_dir,
                sp.parent_ref,
            )
            return fc, None
        if entry.columns.resume_offset is not None and st.st_size > entry.size:
            return None, entry.columns
        return None, None

    def store(self, fc: FileColumns, st: os.stat_result | None) -> None:
        """Keep ``fc`` for ``save`` as it is now (pickled at once: building frames consumes its rows)."""
        self._pending[fc.path] = (
            None
            if st is None or fc.error
            else pickle.dumps(Entry(st.st_size, st.st_mtime_ns, fc), protocol=pickle.HIGHEST_PROTOCOL)
        )

    def save(self) -> None:
        """Write what was stored."""
        if not self._pending:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for old in self.directory.parent.iterdir():
                if (
                    old.is_dir() and old.name != stamp.STAMP
                ):  # another reader version's entries: never read again
                    shutil.rmtree(old, ignore_errors=True)
            for path, entry in self._pending.items():
                target = self._file(path)
                if entry is None:
                    target.unlink(missing_ok=True)
                    continue
                tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
                with open(tmp, "wb") as fh:
                    fh.write(entry)
                os.replace(tmp, target)
        except OSError:
            return  # a read-only cache directory costs speed, not correctness
        self._pending.clear()

    def __len__(self) -> int:
        return len(list(self.directory.glob("*.pkl"))) if self.directory.exists() else 0


def clear(root: Path) -> int:
    """Delete ctxtool's cache under ``root``; returns the number of bytes freed."""
    freed = 0
    for sub in ("index", "corpus", "prices"):
        folder = root / sub
        if not folder.exists():
            continue
        for path in folder.rglob("*"):
            if path.is_file():
                freed += path.stat().st_size
        shutil.rmtree(folder, ignore_errors=True)
    return freed
