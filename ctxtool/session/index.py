"""The incremental index: what each session file held the last time it was read.

Owns: where ctxtool's cache lives (``--cache-dir`` > ``$CTXTOOL_CACHE_DIR`` > the platform's user cache
directory), the per-file entries (keyed by path, size, modification time and a reader-version stamp that is
part of the index file's name), and the fingerprint of a whole scan. An unchanged file is not read again; a
JSONL file that only grew is read from its last complete line (``columns.columns_from_file``). Must not
import polars, nor ``hashlib`` (``ctxtool.common.digest`` says why).

One SQLite database: a run reads only the entries it needs, and a first run writes hundreds in one
transaction (a file per entry cost a quarter of a second on 860 files). A damaged, locked or unwritable index
is ignored (rebuilt when it can be), never fatal. ``entries`` holds a file's ``FileColumns`` without its rows,
``rows`` the rows: ``stats`` without polars opens it with ``rows=False``, reads every entry in one query, and
``fill`` adds the rows of the files that need them (a warm ``stats`` of the bench corpus: 0.005 s against
0.03 s). ``PRAGMA user_version`` names the layout (``_LAYOUT``): another is read as none, emptied on write.

The entries are data, never code: MessagePack decoded into typed structs only, so a cache restored from
elsewhere cannot run anything. Every row keeps a CRC-32 (``_sum``) of its payload and key, since damage that
still decodes would change a report silently. An entry that does not decode, fails its checksum, or whose rows
are not of its stamp, is ignored, its file read again, and the run says so once (``FileIndex.notice``). A
database SQLite finds damaged, or whose integrity check fails once rows of it did not pass theirs, is read no
more that run; the first write replaces it with the rows that still pass (``_replace``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeGuard

import msgspec

from ctxtool.common.wording import plural
from ctxtool.session import stamp
from ctxtool.session.columns import FileColumns
from ctxtool.session.discover import SessionPath
from ctxtool.session.stamp import cache_root

__all__ = ["Entry", "FileIndex", "cache_root", "clear"]

# How long a run waits for another run's write to the index before going on without it.
_LOCK_TIMEOUT_S = 5.0
# The layout of the tables (``PRAGMA user_version``); 2: a file's rows apart from its entry; 3: a checksum
# (``sum``) in every row.
_LAYOUT = 3
# Each table's columns. ``side``: what a later stage made of a file (``kind`` names the stage and its
# version), valid while the file has the size and modification time it had when read: opaque to the index.
_TABLES = {
    "entries": "path TEXT PRIMARY KEY, entry BLOB NOT NULL, sum BLOB NOT NULL",
    "rows": "path TEXT PRIMARY KEY, rows BLOB NOT NULL, sum BLOB NOT NULL",
    "side": "path TEXT NOT NULL, kind TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, "
    "data BLOB NOT NULL, sum BLOB NOT NULL, PRIMARY KEY (path, kind)",
}
_SIDE_INSERT = "INSERT OR REPLACE INTO side VALUES (?, ?, ?, ?, ?, ?)"
# The bytes of a row's checksum (CRC-32, ``_sum``): a randomly damaged row passes it once in 2**32.
_SUM_SIZE = 4
# Commits are not synced: the index is a cache. A crashed run still leaves a whole database (the rollback
# journal is written either way); only a system crash or power loss could damage it, and a damaged index is
# replaced. Synced, a first run's commits held the parent for 0.1-0.13 s of the 0.13-0.18 s it spent writing.
_UNSYNCED = "PRAGMA synchronous = OFF"
# Errors that mean the file is not a usable database (it is replaced): not one, a damaged one, or one without
# this layout's tables (SQLITE_ERROR). None: Python's, reading a text that is not UTF-8. Any other leaves it.
_DAMAGED = {"SQLITE_NOTADB", "SQLITE_CORRUPT", "SQLITE_ERROR", None}
# What reading a damaged database may raise: SQLite's errors, and Python's when SQLite's message is not UTF-8.
_DB_ERRORS = (sqlite3.Error, UnicodeDecodeError)
# Errors of another run holding the database for longer than the timeout: passing, said nothing of.
_LOCKED = {"SQLITE_BUSY", "SQLITE_LOCKED"}


class Entry(msgspec.Struct, array_like=True):
    """A file as read when it had this size and modification time: its columns without their rows."""

    size: int
    mtime_ns: int
    columns: FileColumns


class _Stamp(msgspec.Struct, array_like=True):
    """The size and modification time an ``Entry`` or ``_Rows`` begins with (the rest is not decoded)."""

    size: int
    mtime_ns: int


class _Rows(msgspec.Struct, array_like=True):
    """A file's rows (``FileColumns.messages_cols`` and ``tools_cols``), of the file as its entry has it."""

    size: int
    mtime_ns: int
    messages_cols: list[bytes]
    tools_cols: list[bytes]


_encode = msgspec.msgpack.Encoder().encode
_decode_entry = msgspec.msgpack.Decoder(Entry).decode
_decode_rows = msgspec.msgpack.Decoder(_Rows).decode
_decode_stamp = msgspec.msgpack.Decoder(_Stamp).decode
_UNDECODABLE = (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError)
# Paths asked for in one query (SQLite allows 32766 variables since 3.32, 999 before).
_QUERY_PATHS = 500
# A file's entry and rows as written: (entry, its checksum, rows, their checksum).
_Blobs = tuple[bytes, bytes, bytes, bytes]


class FileIndex:
    """Per-file results of earlier reads, in ``<root>/index/<reader version>.sqlite``.

    With ``rows=False`` the files a lookup serves come without their rows until ``fill`` adds them; a grown
    file's earlier result, to resume from, has its rows."""

    def __init__(self, root: Path, *, rows: bool = True) -> None:
        self.path = root / "index" / f"{stamp.STAMP}.sqlite"
        self.rows = rows
        self.hits = self.resumed = self.parsed = 0
        self._pending: dict[str, _Blobs | None] = {}
        self._db: sqlite3.Connection | None = None
        self._opened = False
        self.failed = False  # a write failed: this run writes nothing more (results may be missing from it)
        self._unwritable: str | None = None  # why the index cannot be written at all (not a passing lock)
        self._wrote = False  # this run committed entries (then other reader versions' are tidied away)
        self._unusable: set[str] = set()  # files whose entries failed their checksum or did not decode
        self._unmeasured: set[str] = set()  # files of which what a later stage kept failed its checksum
        self._damage: str | None = None  # what SQLite said of the database it found damaged
        self._stale = False  # that database is still there: read no more this run, replaced by the next write
        self.rebuilt = False  # the database itself was not one, or a damaged one, and was replaced
        self._checked = False  # SQLite checked its integrity (``_sound``): some entries were not usable
        self._entries: dict[object, tuple[object, object]] | None = None  # ``rows=False``: all, read at once
        self._bare: dict[str, Entry] = {}  # files served without their rows, by path (``fill`` adds them)
        self._gone: set[str] = set()  # served, then forgotten: read again
        # What later stages kept of each file (``sides``), read at once: by path, then as each was checked.
        self._side_rows: dict[object, list[tuple[object, ...]]] | None = None
        self._side_ok: dict[str, list[tuple[object, object, object, bytes]]] = {}
        self._discard: list[tuple[str, object]] = []  # (path, kind) of those that failed: deleted at a write

    def _connect(self, *, create: bool) -> sqlite3.Connection | None:
        """The database, opened once; with ``create``, made (or remade, if damaged) when it must be."""
        if self._db is not None or (self._opened and not create):
            return self._db
        self._opened = True
        if self._stale:  # found damaged this run: not read again; the first write replaces it
            return self._replace() if create else None
        if not create and not self.path.exists():
            return None
        db = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = _open(self.path)
            if not _laid_out(db, create=create):
                db.close()
                return None  # another layout's, not to be written: as if there were none
        except (OSError, *_DB_ERRORS) as exc:
            _close(db)
            if not isinstance(exc, OSError) and self._damaged(exc):
                return self._replace() if create else None
            if create:
                self._cannot_write(exc)
            return None  # locked by another run, unreadable, read-only: go on without the index
        self._db = db
        return db

    def _damaged(self, exc: Exception) -> bool:
        """Whether ``exc`` says the database is damaged (``_DAMAGED``; a ``UnicodeDecodeError``: SQLite's
        message naming a damaged table was not UTF-8); if so, it is set aside."""
        if not isinstance(exc, UnicodeDecodeError) and getattr(exc, "sqlite_errorname", None) not in _DAMAGED:
            return False
        self._set_aside(str(exc) or type(exc).__name__)
        return True

    def _set_aside(self, why: str) -> None:
        """The database is damaged: this run reads nothing more from it, and the next write replaces it."""
        self._damage = self._damage or why
        self._stale = True
        _close(self._db)
        self._db = None

    def _sound(self, db: sqlite3.Connection) -> sqlite3.Connection | None:
        """``db``, after an entry of it was not usable, once SQLite's integrity check finds it whole; else the
        database that replaces it. Damage in its indexes passes every quick look, and would make the same
        files fail the same way every run."""
        self._checked = True
        try:
            found = db.execute("PRAGMA integrity_check(1)").fetchall()
        except _DB_ERRORS as exc:
            return self._connect(create=True) if self._damaged(exc) else db
        if found == [("ok",)]:
            return db
        self._set_aside(str(found[0][0]) if found else "integrity check failed")
        return self._connect(create=True)

    def _replace(self) -> sqlite3.Connection | None:
        """A new database in place of the damaged one, holding what of it is intact (``_salvage``), without
        its rollback journal (played back into the new one, it would damage it); None when it cannot be made.
        The damaged one is moved aside first, under a name a later ``save`` tidies."""
        aside = self.path.with_name(f"damaged-{self.path.name}")
        try:
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.path, aside)
            self.path.with_name(self.path.name + "-journal").unlink(missing_ok=True)
            db = _fresh(self.path)
        except (OSError, *_DB_ERRORS):
            return None
        _salvage(aside, db)
        with contextlib.suppress(OSError):
            aside.unlink(missing_ok=True)
        self._db, self._stale, self.rebuilt = db, False, True
        return db

    def _cannot_write(self, exc: Exception) -> None:
        """Remember why the index cannot be written, unless another run merely holds its lock."""
        if getattr(exc, "sqlite_errorname", "") not in _LOCKED:
            strerror = exc.strerror if isinstance(exc, OSError) else None
            self._unwritable = strerror or str(exc) or type(exc).__name__

    def _query(self, sql: str, args: Sequence[object] = ()) -> list[tuple[object, ...]] | None:
        """The rows of a read; None when it cannot be read (absent, locked, of another layout, or damaged)."""
        db = self._connect(create=False)
        if db is None:
            return None
        try:
            return db.execute(sql, args).fetchall()
        except _DB_ERRORS as exc:
            self._damaged(exc)
            return None

    def entry(self, path: str) -> Entry | None:
        """The entry of ``path`` with its rows (None when there is none, or none usable)."""
        if path in self._gone:
            return None
        if self.rows:
            found = self._query(
                "SELECT e.entry, e.sum, r.rows, r.sum FROM entries AS e LEFT JOIN rows AS r USING (path) "
                "WHERE e.path = ?",
                (path,),
            )
            if not found:
                return None
            data, digest, rows, rows_digest = found[0]
            head = self._decoded(path, data, digest)
        else:
            head = self._head(path)
            if head is None:
                return None
            found = self._query("SELECT rows, sum FROM rows WHERE path = ?", (path,))
            if found is None:
                return None  # not readable now (held by another run: unsaid; or damaged: said)
            rows, rows_digest = found[0] if found else (None, None)
        if head is None:
            return None
        if not self._with_rows(head, rows, rows_digest):
            self._unusable.add(path)
            return None
        return head

    def _head(self, path: str) -> Entry | None:
        """The entry of ``path`` without its rows, from every entry, read at once (``rows=False``). What later
        stages kept of the file is checked now too, so that this run's notice counts it."""
        if self._entries is None:
            found = self._query("SELECT path, entry, sum FROM entries") or ()
            self._entries = {path_: (data, digest) for path_, data, digest in found}
        if path in self._gone:
            return None
        self._checked_sides(path)
        stored = self._entries.get(path)
        return None if stored is None else self._decoded(path, *stored)

    def _decoded(self, path: str, data: object, digest: object) -> Entry | None:
        """The entry ``data`` holds for ``path``: None when there is none, or it is not usable (counted)."""
        if data is None:
            return None
        loaded = None
        if _intact(data, f"entry\0{path}", digest):
            with contextlib.suppress(*_UNDECODABLE):
                loaded = _decode_entry(data)
        if loaded is None or loaded.columns.path != path:
            self._unusable.add(path)
            return None
        return loaded

    @staticmethod
    def _with_rows(head: Entry, data: object, digest: object, fc: FileColumns | None = None) -> bool:
        """Give ``fc`` (default: ``head``'s columns) the rows ``data`` holds; False when they are not those
        of ``head``'s file, or fail their checksum (``digest``)."""
        rows = None
        if _intact(data, f"rows\0{head.columns.path}", digest):
            with contextlib.suppress(*_UNDECODABLE):
                rows = _decode_rows(data)
        if rows is None or (rows.size, rows.mtime_ns) != (head.size, head.mtime_ns):
            return False
        fc = head.columns if fc is None else fc
        fc.messages_cols, fc.tools_cols = rows.messages_cols, rows.tools_cols
        return True

    def notice(self) -> str | None:
        """One line for the user when the index held something it could not use (it is rebuilt), else None."""
        if self.rebuilt:
            return f"the index at {self.path} was not a usable database; it was rebuilt"
        if self._damage is not None:
            return (
                f"the index at {self.path} is damaged ({self._damage}) and could not be replaced: this run "
                "read the session files without it. Delete it with `ctxtool cache clear`"
            )
        if self._unwritable:
            return (
                f"the index at {self.path} cannot be written ({self._unwritable}): nothing read is kept, so "
                "the next run reads every file again. Point --cache-dir (or CTXTOOL_CACHE_DIR) at a "
                "folder you can write"
            )
        if self._unusable or self._unmeasured:
            again = "read again from the session files" if self._unusable else "measured again"
            return (
                f"{plural(len(self._unusable | self._unmeasured), 'index entry', 'index entries')} in "
                f"{self.path} could not be used (damaged, another ctxtool version's, or not ctxtool's); "
                f"those files were {again}"
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
            fc.group_key, fc.project = sp.group_key, sp.project
            fc.project_dir, fc.parent_ref = sp.project_dir, sp.parent_ref
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
        few hundred files. Returns those it could not give them: the caller has the index ``forget`` them and
        reads them again. Only rows that are not usable (not those another run held locked) are counted."""
        want = [fc for fc in files if fc.path in self._bare]
        found: dict[object, tuple[object, object]] = {}
        unread: set[str] = set()
        for i in range(0, len(want), _QUERY_PATHS):
            paths = [fc.path for fc in want[i : i + _QUERY_PATHS]]
            got = self._query(
                f"SELECT path, rows, sum FROM rows WHERE path IN ({','.join('?' * len(paths))})", paths
            )
            if got is None:
                unread.update(paths)
            else:
                found.update((path, (rows, digest)) for path, rows, digest in got)
        missed = [
            fc
            for fc in want
            if not self._with_rows(self._bare.pop(fc.path), *found.get(fc.path, (None, None)), fc)
        ]
        self._unusable.update(fc.path for fc in missed if fc.path not in unread)
        return missed

    def forget(self, paths: Iterable[str]) -> None:
        """Serve ``paths`` no more this run, nor count them as served: their files are read again."""
        for path in paths:
            self._bare.pop(path, None)
            self._gone.add(path)
            self.hits -= 1

    def store(self, fc: FileColumns, st: os.stat_result | None) -> None:
        """Keep ``fc`` for ``flush`` as it is now (encoded at once: building frames consumes its rows)."""
        self._pending[fc.path] = _blobs(fc, st)

    def flush(self) -> None:
        """Write what was stored so far, in a transaction of its own, and let go of it: a first run calls this
        as each batch arrives, so the entries are not all held until ``save`` and are written while workers
        parse. One transaction held open for the whole scan would lock out other runs' reads once SQLite
        spills it to the file (a reader waited its whole 5 s timeout in a test)."""
        if not (self._pending or self._discard) or self.failed:
            return
        pending = self._pending

        def write(db: sqlite3.Connection) -> None:
            kept = [(path, blobs) for path, blobs in pending.items() if blobs is not None]
            gone = [(path,) for path, blobs in pending.items() if blobs is None]
            for table, at in (("entries", 0), ("rows", 2)):  # each a blob and its checksum (``_Blobs``)
                rows = [(path, blobs[at], blobs[at + 1]) for path, blobs in kept]
                db.executemany(f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?)", rows)
                db.executemany(f"DELETE FROM {table} WHERE path = ?", gone)

        if self._transaction(write):
            self._wrote = True
        self._pending = {}

    def _transaction(self, write: Callable[[sqlite3.Connection], object]) -> bool:
        """Run ``write`` in a transaction of its own; False (and no more writes this run) when it fails; once
        more in the database that replaces a damaged one. Rows of ``side`` that failed their checksum go
        first: nothing else replaces one whose file is not read again."""
        for _ in range(2):
            db = self._connect(create=True)
            if db is not None and (self._unusable or self._unmeasured) and not self._checked:
                db = self._sound(db)
            if db is None:
                break
            try:
                db.execute("BEGIN IMMEDIATE")
                db.executemany("DELETE FROM side WHERE path = ? AND kind = ?", self._discard)
                write(db)
                db.execute("COMMIT")
                self._discard = []
                return True
            except _DB_ERRORS as exc:
                with contextlib.suppress(sqlite3.Error):
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                if not self._damaged(exc):
                    # Locked by another run for too long, or a read-only cache: speed, not correctness.
                    self._cannot_write(exc)
                    break
        self.failed = True
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
        for old in others:  # another reader version's entries (or the layout before SQLite): never read again
            with contextlib.suppress(OSError):
                shutil.rmtree(old) if old.is_dir() else old.unlink()

    def sides(self, kind: str, stamps: Mapping[str, Sequence[int] | None]) -> dict[str, bytes]:
        """What ``store_sides`` kept of ``kind`` for the files of ``stamps`` (path: [size, mtime_ns]) that
        still have that size and modification time, and pass their checksum."""
        out = {}
        for path, stamp_now in stamps.items():
            if stamp_now is None:
                continue
            for kind_, size, mtime_ns, data in self._checked_sides(path):
                if kind_ == kind and list(stamp_now) == [size, mtime_ns]:
                    out[path] = data
        return out

    def _checked_sides(self, path: str) -> list[tuple[object, object, object, bytes]]:
        """(kind, size, mtime_ns, data) of what later stages kept of ``path`` that passes its checksum. Every
        file's are read at once; each file's checked once, and one that fails is counted."""
        if self._side_rows is None:
            self._side_rows = {}
            for path_, *row in self._query("SELECT path, kind, size, mtime_ns, data, sum FROM side") or ():
                self._side_rows.setdefault(path_, []).append(tuple(row))
        unchecked = self._side_rows.pop(path, None)
        if unchecked is not None:
            ok = self._side_ok[path] = []
            for kind, size, mtime_ns, data, digest in unchecked:
                if _intact(data, _side_key(kind, path, size, mtime_ns), digest):
                    ok.append((kind, size, mtime_ns, data))
                else:
                    self._unmeasured.add(path)
                    self._discard.append((path, kind))
        return self._side_ok.get(path, [])

    def store_sides(self, kind: str, items: Iterable[tuple[str, Sequence[int], bytes]]) -> None:
        """Keep ``data`` of ``kind`` for each (path, [size, mtime_ns] as read, data), in one transaction."""
        rows = [
            (path, kind, stamp_[0], stamp_[1], data, _sum(_side_key(kind, path, stamp_[0], stamp_[1]), data))
            for path, stamp_, data in items
        ]
        if rows and not self.failed:
            self._transaction(lambda db: db.executemany(_SIDE_INSERT, rows))
            self._side_rows, self._side_ok = None, {}  # read again if asked again

    def close(self) -> None:
        """Close the database (it is opened again when needed), e.g. before forking worker processes."""
        if self._db is not None:
            self._db.close()
            self._db = None
        self._opened = False

    def __len__(self) -> int:
        found = self._query("SELECT COUNT(*) FROM entries")
        return int(found[0][0]) if found and isinstance(found[0][0], int) else 0


def _blobs(fc: FileColumns, st: os.stat_result | None) -> _Blobs | None:
    """The entry and the rows of ``fc`` (read from a file of stat ``st``), with their checksums."""
    if st is None or fc.error:
        return None
    head = msgspec.structs.replace(fc, messages_cols=[], tools_cols=[])
    entry = _encode(Entry(st.st_size, st.st_mtime_ns, head))
    rows = _encode(_Rows(st.st_size, st.st_mtime_ns, fc.messages_cols, fc.tools_cols))
    return entry, _sum(f"entry\0{fc.path}", entry), rows, _sum(f"rows\0{fc.path}", rows)


def _sum(key: str, data: bytes) -> bytes:
    """The checksum of ``data`` kept under ``key`` (its table and path: moved to another key, it fails).

    CRC-32: it finds every flipped bit and burst of damage up to 32 bits, and misses random damage once in
    four billion; a digest is not needed against damage nobody chose (over 2.3 MB: 0.5 ms, BLAKE2b 2.4 ms)."""
    return zlib.crc32(data, zlib.crc32(key.encode("utf-8", "surrogatepass"))).to_bytes(_SUM_SIZE, "big")


def _intact(data: object, key: str, digest: object) -> TypeGuard[bytes]:
    """Whether ``data``, read back from under ``key``, is bytes whose checksum is ``digest``."""
    return isinstance(data, bytes) and isinstance(digest, bytes) and _sum(key, data) == digest


def _side_key(kind: object, path: object, size: object, mtime_ns: object) -> str:
    """What a later stage's data is kept under: its kind, its file, and that file's stamp when it was read."""
    return f"side\0{kind}\0{path}\0{size}\0{mtime_ns}"


def _salvage(source: Path, db: sqlite3.Connection) -> None:
    """Copy into ``db``, a new database, what of the damaged one at ``source`` reads back intact, in one
    transaction. What cannot be read is left behind: those files are read again."""
    try:
        old = sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True, timeout=_LOCK_TIMEOUT_S)
    except (ValueError, *_DB_ERRORS):
        return
    old.text_factory = bytes  # a damaged text is skipped (``_every``), not the end of a table's scan
    try:
        db.execute("BEGIN IMMEDIATE")
        _copy_intact(old, db)
        db.execute("COMMIT")
    except _DB_ERRORS:
        with contextlib.suppress(*_DB_ERRORS):
            if db.in_transaction:
                db.execute("ROLLBACK")
    finally:
        _close(old)


def _copy_intact(old: sqlite3.Connection, db: sqlite3.Connection) -> None:
    """Copy from ``old`` into ``db`` each file's entry and rows when both pass their checksums and are of the
    same stamp, and what later stages kept that passes its own."""
    heads = {}  # path: (entry, checksum, stamp), the last intact one (the newest, in rowid order)
    for path, data, digest in _every(old, "entries", 3):
        if _intact(data, f"entry\0{path}", digest):
            heads[path] = (data, digest, _stamp_of(data))
    whole = set()
    for path, data, digest in _every(old, "rows", 3):
        head = heads.get(path)
        if head and head[2] and _intact(data, f"rows\0{path}", digest) and head[2] == _stamp_of(data):
            db.execute("INSERT OR REPLACE INTO rows VALUES (?, ?, ?)", (path, data, digest))
            whole.add(path)
    db.executemany(
        "INSERT OR REPLACE INTO entries VALUES (?, ?, ?)",
        [(path, data, digest) for path, (data, digest, _) in heads.items() if path in whole],
    )
    for path, kind, size, mtime_ns, data, digest in _every(old, "side", 6):
        kind = _text(kind)
        if kind is not None and _intact(data, _side_key(kind, path, size, mtime_ns), digest):
            db.execute(_SIDE_INSERT, (path, kind, size, mtime_ns, data, digest))


def _every(old: sqlite3.Connection, table: str, width: int) -> Iterator[tuple[object, ...]]:
    """Every row of ``table`` (``width`` columns, the first its path) that can be read in a damaged database
    whose texts come as bytes: in the table's order up to a page that cannot be, then, by path, those its
    index names that this scan did not reach. Columns are taken by place, not by names a damaged schema may
    have changed; a row whose path is not UTF-8, or of another width, is left out."""
    seen = set()
    for blob, *row in _readable(old, f"SELECT * FROM {table}"):
        if (path := _text(blob)) is not None and len(row) + 1 == width:
            seen.add(path)
            yield (path, *row)
    for (blob,) in list(_readable(old, f"SELECT DISTINCT path FROM {table} ORDER BY path")):
        if (path := _text(blob)) is not None and path not in seen:
            seen.add(path)
            for _, *row in _readable(old, f"SELECT * FROM {table} WHERE path = ?", (path,)):
                if len(row) + 1 == width:
                    yield (path, *row)


def _text(data: object) -> str | None:
    """A text (read as bytes: ``text_factory = bytes``), when it is UTF-8."""
    if isinstance(data, bytes):
        with contextlib.suppress(UnicodeDecodeError):
            return data.decode()
    return None


def _readable(db: sqlite3.Connection, sql: str, args: Sequence[object] = ()) -> Iterator[tuple[object, ...]]:
    """The rows of ``sql`` in ``db`` up to the first that cannot be read."""
    with contextlib.suppress(*_DB_ERRORS):
        yield from db.execute(sql, args)


def _stamp_of(data: bytes) -> tuple[int, int] | None:
    """The (size, mtime_ns) an entry's or a file's rows were read at."""
    try:
        got = _decode_stamp(data)
    except _UNDECODABLE:
        return None
    return got.size, got.mtime_ns


def _open(path: Path, *, fresh: bool = False) -> sqlite3.Connection:
    """A connection to the database at ``path`` (made when there is none), its commits unsynced; ``fresh``:
    a new database, where there is none, laid out (``_LAYOUT``)."""
    db = sqlite3.connect(path, timeout=_LOCK_TIMEOUT_S, isolation_level=None)
    try:
        db.execute(_UNSYNCED)
        if fresh:
            _laid_out(db, create=True)
    except BaseException:
        db.close()
        raise
    return db


def _fresh(path: Path) -> sqlite3.Connection:
    return _open(path, fresh=True)


def _close(db: sqlite3.Connection | None) -> None:
    if db is not None:
        with contextlib.suppress(sqlite3.Error):
            db.close()


def _laid_out(db: sqlite3.Connection, *, create: bool) -> bool:
    """Whether ``db`` has this layout (``_LAYOUT``); with ``create``, it is given it (emptied first when it
    has another)."""
    (layout,) = db.execute("PRAGMA user_version").fetchone()
    if layout == _LAYOUT or not create:
        return bool(layout == _LAYOUT)
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] != _LAYOUT:  # not done by another run meanwhile
            for table in _TABLES:
                db.execute(f"DROP TABLE IF EXISTS {table}")
            for table, columns in _TABLES.items():
                db.execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")
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
    # replay/: what a warm run replays (ctxtool.frames.replays); corpus/: the frames an earlier version kept;
    # guard/: the guard hook's state (ctxtool.hooks.ledger).
    for sub in ("index", "replay", "corpus", "prices", "guard"):
        folder = root / sub
        if not folder.exists():
            continue
        freed += sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
        shutil.rmtree(folder, ignore_errors=True)
    return freed
