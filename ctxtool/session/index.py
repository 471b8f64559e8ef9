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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ctxtool import __version__
from ctxtool.session.columns import COLUMNS_VERSION, FileColumns
from ctxtool.session.discover import SessionPath

STAMP = f"{__version__}-c{COLUMNS_VERSION}"


def cache_root(cache_dir: str | Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """``cache_dir`` if given, else ``$CTXTOOL_CACHE_DIR``, else the platform's user cache dir."""
    env = os.environ if env is None else env
    if cache_dir:
        return Path(cache_dir).expanduser()
    if env.get("CTXTOOL_CACHE_DIR"):
        return Path(env["CTXTOOL_CACHE_DIR"]).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ctxtool", appauthor=False))


@dataclass(slots=True)
class Entry:
    size: int
    mtime_ns: int
    columns: FileColumns


class FileIndex:
    """Per-file results of earlier reads, loaded from and saved to one file under the cache root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "index" / f"files-{STAMP}.pkl"
        self.entries: dict[str, Entry] = {}
        self.hits = self.resumed = self.parsed = 0
        self._dirty = False
        try:
            with open(self.path, "rb") as fh:
                loaded = pickle.load(fh)
            if isinstance(loaded, dict):
                self.entries = loaded
        except (
            OSError,
            pickle.UnpicklingError,
            EOFError,
            AttributeError,
            ImportError,
            TypeError,
            ValueError,
        ):
            self.entries = {}

    def lookup(self, sp: SessionPath, st: os.stat_result) -> tuple[FileColumns | None, FileColumns | None]:
        """(the cached result when the file is unchanged, an earlier result to resume from when it grew)."""
        entry = self.entries.get(str(sp.path))
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
        if st is None or fc.error:
            self.entries.pop(fc.path, None)
        else:
            self.entries[fc.path] = Entry(st.st_size, st.st_mtime_ns, fc)
        self._dirty = True

    def save(self) -> None:
        """Write the index atomically (before the frames are built: building consumes the rows)."""
        if not self._dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            with open(tmp, "wb") as fh:
                pickle.dump(self.entries, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.path)
            for old in self.path.parent.glob("files-*.pkl"):
                if old != self.path:
                    old.unlink(missing_ok=True)  # another reader version's index is never read again
        except OSError:
            return  # a read-only cache directory costs speed, not correctness
        self._dirty = False


def fingerprint(files: Iterable[tuple[SessionPath, os.stat_result | None]], *extra: object) -> str:
    """Identifies one scan: every file's place and stamp, plus whatever else shapes the result."""
    h = hashlib.blake2b(digest_size=16)
    h.update(STAMP.encode())
    for sp, st in files:
        stamp = (st.st_size, st.st_mtime_ns) if st is not None else None
        h.update(repr((str(sp.path), sp.group_key, sp.project, sp.parent_ref, stamp)).encode())
    h.update(repr(extra).encode())
    return h.hexdigest()


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
