"""The incremental index: what each session file held the last time it was read.

Owns: where ctxtool's cache lives (``--cache-dir`` > ``$CTXTOOL_CACHE_DIR`` > the platform's user cache
directory), the per-file entries (keyed by path, size, modification time and a reader-version stamp), and
the fingerprint of a whole scan. A file whose size and modification time are unchanged is not read again; a
JSONL file that only grew is read from its last complete line (see ``columns.columns_from_file``); a changed
reader version invalidates everything, because the stamp is part of the index file's name.

The entries live in one SQLite database (Python's ``sqlite3``) in the user's own cache directory: a run that
needs a few entries (a grown session) reads only those, and a first run writes hundreds in one transaction
(one small file per entry cost a quarter of a second of file creation on a scan of 860 files). SQLite's
locking keeps two runs from corrupting it; a damaged, locked or unwritable index is ignored (and rebuilt when
it can be), never fatal. Must not import polars.

A file's entry is kept in two tables: ``entries`` holds its size, modification time and ``FileColumns``
without the rows (``messages_cols`` and ``tools_cols``), about a kilobyte; ``rows`` holds the rows, nearly
all of its bytes. A reader that may not need a served file's rows (``stats`` without polars, which takes
what it measured of each file from beside it) opens the index with ``rows=False``: its lookups read every
file's entry in one query and no rows, and ``fill`` adds the rows of the files that turn out to need them.
On the bench corpus (860 files, 17 MB of rows) a warm ``stats`` took about 0.03 s to look its files up with
their rows (a query and a decode of each) against 0.005 s without. ``PRAGMA user_version`` names the layout
(``_LAYOUT``): a database of another is read as none, and emptied before it is written.

The entries are data, never code: MessagePack (msgspec) decoded into the typed ``Entry`` and ``_Rows`` only,
so a cache restored from elsewhere (a CI cache shared across branches, another user's folder) cannot run
anything when it is read. An entry that does not decode into those types (another version's, a damaged or a
foreign one), or whose rows are not of the same size and modification time, is ignored, the file read again,
and the run says so once (``FileIndex.notices``).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import msgspec

from ctxtool.common.wording import plural
from ctxtool.session import stamp
from ctxtool.session.columns import FileColumns
from ctxtool.session.discover import SessionPath
from ctxtool.session.stamp import cache_root

__all__ = ["Entry", "FileIndex", "cache_root", "clear"]

# How long a run waits for another run's write to the index before going on without it.
_LOCK_TIMEOUT_S = 5.0
# The layout of the tables (``PRAGMA user_version``); 2: a file's rows apart from its entry.
_LAYOUT = 2
_SCHEMA = "CREATE TABLE IF NOT EXISTS entries (path TEXT PRIMARY KEY, entry BLOB NOT NULL)"
_ROWS_SCHEMA = "CREATE TABLE IF NOT EXISTS rows (path TEXT PRIMARY KEY, rows BLOB NOT NULL)"
# What a later stage made of a file (``kind`` names the stage and its version), valid while the file has the
# size and modification time it had when read: opaque bytes to the index.
_SIDE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS side (path TEXT NOT NULL, kind TEXT NOT NULL, size INTEGER NOT NULL, "
    "mtime_ns INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (path, kind))"
)
# Commits are not synced to the disk: the index is a cache. A run that crashes mid-write still leaves a whole
# database (SQLite's rollback journal is written either way); only an operating-system crash or a power loss
# could damage it, and a damaged index is replaced (``_DAMAGED``) or its unreadable entries read again.
# Synced, a first run's commits (one per batch of files, about 30 on the bench corpus) held the parent for
# 0.1-0.13 s of the 0.13-0.18 s it spent writing, waiting on the disk while the worker parsed alone; on the
# 43 real sessions, 16 syncs took 56 ms of a 0.3 s first run.
_UNSYNCED = "PRAGMA synchronous = OFF"
# Errors that mean the file is not a usable database (it is replaced); any other (a lock) leaves it alone.
_DAMAGED = {"SQLITE_NOTADB", "SQLITE_CORRUPT"}
# Errors of another run holding the database for longer than the timeout: passing, said nothing of.
_LOCKED = {"SQLITE_BUSY", "SQLITE_LOCKED"}


class Entry(msgspec.Struct, array_like=True):
    """A file as read when it had this size and modification time: its columns without their rows."""

    size: int
    mtime_ns: int
    columns: FileColumns


class _Rows(msgspec.Struct, array_like=True):
    """A file's rows (``FileColumns.messages_cols`` and ``tools_cols``), of the file as its entry has it."""

    size: int
    mtime_ns: int
    messages_cols: list[bytes]
    tools_cols: list[bytes]


_encode = msgspec.msgpack.Encoder().encode
_decode_entry = msgspec.msgpack.Decoder(Entry).decode
_decode_rows = msgspec.msgpack.Decoder(_Rows).decode
_UNDECODABLE = (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError)
# Paths asked for in one query (SQLite allows 32766 variables since 3.32, 999 before).
_QUERY_PATHS = 500


class FileIndex:
    """Per-file results of earlier reads, in ``<root>/index/<reader version>.sqlite``.

    With ``rows=False`` the files a lookup serves come without their rows (empty ``messages_cols`` and
    ``tools_cols``) until ``fill`` adds them; a grown file's earlier result, to resume from, has its rows."""

    def __init__(self, root: Path, *, rows: bool = True) -> None:
        self.root = root
        self.path = root / "index" / f"{stamp.STAMP}.sqlite"
        self.rows = rows
        self.hits = self.resumed = self.parsed = 0
        self._pending: dict[str, tuple[bytes, bytes] | None] = {}
        self._db: sqlite3.Connection | None = None
        self._opened = False
        self._failed = False  # a write failed: this run writes nothing more
        self._unwritable: str | None = None  # why the index cannot be written at all (not a passing lock)
        self._wrote = False  # this run committed entries (then other reader versions' are tidied away)
        self.unusable = 0  # entries that did not decode (another version's, damaged, foreign): read again
        self.rebuilt = False  # the database itself was not one and was replaced
        self._entries: dict[str, bytes] | None = None  # with ``rows=False``: every entry, read at once
        self._bare: dict[str, Entry] = {}  # files served without their rows, by path (``fill`` adds them)
        self._gone: set[str] = set()  # served, then forgotten: read again

    def _connect(self, *, create: bool) -> sqlite3.Connection | None:
        """The database, opened once; with ``create``, made (or remade, if damaged) when it must be."""
        if self._db is not None or (self._opened and not create):
            return self._db
        self._opened = True
        if not create and not self.path.exists():
            return None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=_LOCK_TIMEOUT_S, isolation_level=None)
            db.execute(_UNSYNCED)
            if not _laid_out(db, create=create):
                db.close()
                return None  # another layout's, not to be written: as if there were none
        except sqlite3.Error as exc:
            if not create or getattr(exc, "sqlite_errorname", "") not in _DAMAGED:
                if create:
                    self._cannot_write(exc)
                return None  # locked by another run, unreadable, read-only: go on without the index
            try:  # not a database, or a damaged one: start a new one
                self.path.unlink(missing_ok=True)
                db = sqlite3.connect(self.path, timeout=_LOCK_TIMEOUT_S, isolation_level=None)
                db.execute(_UNSYNCED)
                _laid_out(db, create=True)
            except (OSError, sqlite3.Error):
                return None
            self.rebuilt = True
        except OSError as exc:
            if create:
                self._cannot_write(exc)
            return None
        self._db = db
        return db

    def _cannot_write(self, exc: OSError | sqlite3.Error) -> None:
        """Remember why the index cannot be written, unless another run merely holds its lock."""
        if getattr(exc, "sqlite_errorname", "") in _LOCKED:
            return
        self._unwritable = (
            (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__
        )

    def _query(self, sql: str, args: Sequence[object] = ()) -> list[tuple[object, ...]] | None:
        """The rows of a read; None when the index cannot be read (absent, locked, of another layout)."""
        db = self._connect(create=False)
        if db is None:
            return None
        try:
            return db.execute(sql, args).fetchall()
        except sqlite3.Error:
            return None

    def entry(self, path: str) -> Entry | None:
        """The entry of ``path`` with its rows (None when there is none, or none usable)."""
        if path in self._gone:
            return None
        if self.rows:
            found = self._query(
                "SELECT e.entry, r.rows FROM entries AS e LEFT JOIN rows AS r USING (path) WHERE e.path = ?",
                (path,),
            )
            head, rows = self._decoded(path, found[0][0] if found else None), found[0][1] if found else None
        else:
            head = self._head(path)
            if head is None:
                return None
            found = self._query("SELECT rows FROM rows WHERE path = ?", (path,))
            if found is None:
                return None  # not readable now (held by another run): the file is read again, unsaid
            rows = found[0][0] if found else None
        if head is None:
            return None
        if not self._with_rows(head, rows):
            self.unusable += 1
            return None
        return head

    def _head(self, path: str) -> Entry | None:
        """The entry of ``path`` without its rows, from every entry, read at once (``rows=False``)."""
        if self._entries is None:
            self._entries = dict(self._query("SELECT path, entry FROM entries") or ())  # type: ignore[arg-type]
        return None if path in self._gone else self._decoded(path, self._entries.get(path))

    def _decoded(self, path: str, data: object) -> Entry | None:
        """The entry ``data`` holds for ``path``: None when there is none, or it is not usable (counted)."""
        if data is None:
            return None
        try:
            loaded = _decode_entry(data) if isinstance(data, bytes) else None
        except _UNDECODABLE:
            loaded = None
        if loaded is None or loaded.columns.path != path:
            self.unusable += 1
            return None
        return loaded

    @staticmethod
    def _with_rows(head: Entry, data: object, fc: FileColumns | None = None) -> bool:
        """Give ``fc`` (default: ``head``'s columns) the rows ``data`` holds; False when they are not those
        of ``head``'s file."""
        try:
            rows = _decode_rows(data) if isinstance(data, bytes) else None
        except _UNDECODABLE:
            rows = None
        if rows is None or (rows.size, rows.mtime_ns) != (head.size, head.mtime_ns):
            return False
        fc = head.columns if fc is None else fc
        fc.messages_cols, fc.tools_cols = rows.messages_cols, rows.tools_cols
        return True

    def notice(self) -> str | None:
        """One line for the user when the index held something it could not use (it is rebuilt), else None."""
        if self.rebuilt:
            return f"the index at {self.path} was not a usable database; it was rebuilt"
        if self._unwritable:
            return (
                f"the index at {self.path} cannot be written ({self._unwritable}): nothing read is kept, so "
                "the next run reads every file again. Point --cache-dir (or CTXTOOL_CACHE_DIR) at a "
                "folder you can write"
            )
        if self.unusable:
            return (
                f"{plural(self.unusable, 'index entry', 'index entries')} in {self.path} could not "
                "be used (another ctxtool version's, damaged, or not ctxtool's); those files were read again"
            )
        return None

    def lookup(self, sp: SessionPath, st: os.stat_result) -> tuple[FileColumns | None, FileColumns | None]:
        """(the cached result when the file is unchanged, an earlier result to resume from when it grew)."""
        path = str(sp.path)
        entry = self.entry(path) if self.rows else self._head(path)
        if entry is None:
            return None, None
        fc = entry.columns
        if entry.size == st.st_size and entry.mtime_ns == st.st_mtime_ns:
            # The place on disk may be described differently this time (another PATH argument).
            fc.group_key, fc.project, fc.project_dir, fc.parent_ref = (
                sp.group_key,
                sp.project,
                sp.project_dir,
                sp.parent_ref,
            )
            if not self.rows:
                self._bare[path] = entry
            return fc, None
        if fc.resume_offset is not None and st.st_size > entry.size:
            if not self.rows:
                entry = self.entry(path)  # resumed from its rows
            return (None, entry.columns) if entry is not None else (None, None)
        return None, None

    def fill(self, files: Iterable[FileColumns]) -> list[FileColumns]:
        """Give the files a lookup served without their rows (``rows=False``) their rows, in one query per
        few hundred files. Returns those it could not give them: the caller reads them again (and has the
        index ``forget`` them first). Rows that are not usable count as unusable entries (the notice); rows
        that could not be read (another run holds the index too long) do not."""
        want = [fc for fc in files if fc.path in self._bare]
        found: dict[object, object] = {}
        unread: set[str] = set()
        for i in range(0, len(want), _QUERY_PATHS):
            paths = [fc.path for fc in want[i : i + _QUERY_PATHS]]
            got = self._query(
                f"SELECT path, rows FROM rows WHERE path IN ({','.join('?' * len(paths))})", paths
            )
            if got is None:
                unread.update(paths)
            else:
                found.update(got)  # type: ignore[arg-type]
        missed = [fc for fc in want if not self._with_rows(self._bare.pop(fc.path), found.get(fc.path), fc)]
        self.unusable += sum(fc.path not in unread for fc in missed)
        return missed

    def forget(self, paths: Iterable[str]) -> None:
        """Serve ``paths``, which a lookup served, no more this run, nor count them as served: their files
        are read again."""
        for path in paths:
            self._bare.pop(path, None)
            self._gone.add(path)
            self.hits -= 1

    def store(self, fc: FileColumns, st: os.stat_result | None) -> None:
        """Keep ``fc`` for ``flush`` as it is now (encoded at once: building frames consumes its rows)."""
        self._pending[fc.path] = _blobs(fc, st)

    def flush(self) -> None:
        """Write what was stored so far, in a transaction of its own, and let go of it.

        A first run calls this as each batch of files arrives from the workers, so that the encoded entries
        (tens of megabytes for a few hundred megabytes of sessions) are not all held until ``save`` and the
        writing happens while the workers still parse, not after. Each flush commits: one transaction held
        open for the whole scan would lock out every other run's reads once SQLite spills it to the file
        (a reader waited its whole 5 s timeout, then failed, in a test). Entries are independent, so a scan
        that stops part-way leaves valid ones behind. The commits are not synced (``_UNSYNCED``): this process
        parses files too, and waiting on the disk it did not. After a failure (a lock held too long by
        another run, a read-only cache) this run writes nothing more.
        """
        if not self._pending or self._failed:
            return
        pending = self._pending

        def write(db: sqlite3.Connection) -> None:
            kept = [(path, blobs) for path, blobs in pending.items() if blobs is not None]
            db.executemany(
                "INSERT OR REPLACE INTO entries (path, entry) VALUES (?, ?)",
                [(path, entry) for path, (entry, _) in kept],
            )
            db.executemany(
                "INSERT OR REPLACE INTO rows (path, rows) VALUES (?, ?)",
                [(path, rows) for path, (_, rows) in kept],
            )
            gone = [(path,) for path, blobs in pending.items() if blobs is None]
            db.executemany("DELETE FROM entries WHERE path = ?", gone)
            db.executemany("DELETE FROM rows WHERE path = ?", gone)

        if self._transaction(write):
            self._wrote = True
        self._pending = {}

    def _transaction(self, write: Callable[[sqlite3.Connection], object]) -> bool:
        """Run ``write`` in a transaction of its own; False (and no more writes this run) when it fails."""
        db = self._connect(create=True)
        if db is None:
            self._failed = True
            return False
        try:
            db.execute("BEGIN IMMEDIATE")
            write(db)
            db.execute("COMMIT")
            return True
        except sqlite3.Error as exc:
            # Locked by another run for too long, or a read-only cache: speed, not correctness.
            self._failed = True
            self._cannot_write(exc)
            try:
                if db.in_transaction:
                    db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            return False

    def save(self) -> None:
        """Write what is still pending; once this run wrote entries, those of other reader versions go."""
        self.flush()
        if not self._wrote:
            return
        try:
            others = [p for p in self.path.parent.iterdir() if not p.name.startswith(f"{stamp.STAMP}.sqlite")]
        except OSError:
            return
        for old in others:
            try:  # another reader version's entries (or the layout before SQLite): never read again
                shutil.rmtree(old) if old.is_dir() else old.unlink()
            except OSError:
                continue

    def sides(self, kind: str, stamps: Mapping[str, Sequence[int] | None]) -> dict[str, bytes]:
        """What ``store_sides`` kept of ``kind`` for the files of ``stamps`` (path: [size, mtime_ns]) that
        still have that size and modification time."""
        out = {}
        for path, size, mtime_ns, data in (
            self._query("SELECT path, size, mtime_ns, data FROM side WHERE kind = ?", (kind,)) or ()
        ):
            stamp_now = stamps.get(path) if isinstance(path, str) else None
            if stamp_now is not None and list(stamp_now) == [size, mtime_ns] and isinstance(data, bytes):
                out[str(path)] = data
        return out

    def store_sides(self, kind: str, items: Iterable[tuple[str, Sequence[int], bytes]]) -> None:
        """Keep ``data`` of ``kind`` for each (path, [size, mtime_ns] as read, data), in one transaction."""
        rows = [(path, kind, stamp_[0], stamp_[1], data) for path, stamp_, data in items]
        if rows and not self._failed:
            self._transaction(
                lambda db: db.executemany("INSERT OR REPLACE INTO side VALUES (?, ?, ?, ?, ?)", rows)
            )

    @property
    def failed(self) -> bool:
        """A write failed: results this run read may be missing from the index."""
        return self._failed

    def close(self) -> None:
        """Close the database (it is opened again when needed), e.g. before forking worker processes."""
        if self._db is not None:
            self._db.close()
            self._db = None
        self._opened = False

    def __len__(self) -> int:
        db = self._connect(create=False)
        if db is None:
            return 0
        try:
            return int(db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])
        except sqlite3.Error:
            return 0


def _blobs(fc: FileColumns, st: os.stat_result | None) -> tuple[bytes, bytes] | None:
    """The entry and the rows of ``fc`` read from a file whose stat before reading was ``st`` (None: no
    entry)."""
    if st is None or fc.error:
        return None
    head = msgspec.structs.replace(fc, messages_cols=[], tools_cols=[])
    return (
        _encode(Entry(st.st_size, st.st_mtime_ns, head)),
        _encode(_Rows(st.st_size, st.st_mtime_ns, fc.messages_cols, fc.tools_cols)),
    )


def _laid_out(db: sqlite3.Connection, *, create: bool) -> bool:
    """Whether ``db`` has this layout (``_LAYOUT``); with ``create``, it is given it (emptied first when it
    has another)."""
    (layout,) = db.execute("PRAGMA user_version").fetchone()
    if layout == _LAYOUT:
        return True
    if not create:
        return False
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] != _LAYOUT:  # not done by another run meanwhile
            for table in ("entries", "rows", "side"):
                db.execute(f"DROP TABLE IF EXISTS {table}")
            for schema in (_SCHEMA, _ROWS_SCHEMA, _SIDE_SCHEMA):
                db.execute(schema)
            db.execute(f"PRAGMA user_version = {_LAYOUT}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return True


def clear(root: Path) -> int:
    """Delete ctxtool's cache under ``root``; returns the number of bytes freed."""
    freed = 0
    for sub in (
        "index",
        "corpus",
        "prices",
        "guard",
    ):  # guard/: the guard hook's state (ctxtool.hooks.ledger)
        folder = root / sub
        if not folder.exists():
            continue
        for path in folder.rglob("*"):
            if path.is_file():
                freed += path.stat().st_size
        shutil.rmtree(folder, ignore_errors=True)
    return freed
