"""The frames a scan built, stored between runs: a base written whole, and a delta of sessions re-read since.

Owns: the layout of one stored scan (``<folder>/base-<token>/`` and ``<folder>/delta-<token>/``, each
holding four frames as Arrow IPC files and a ``meta.json``), writing it so that a reader never sees half
of it, and reading it back. The caller's own state file (see ``ctxtool.frames.loading``), written *after* the
folders, names the ones that make up the current state; folders it no longer names are then removed.

Why a delta: a run after Gemini CLI appended to one session re-reads that session and splices its rows into
the stored frames. Writing all the frames again (tens of megabytes for a few hundred megabytes of sessions)
cost more than everything else that run did. So a splice stores only the rows of the sessions that changed
since the base was written, plus the small sessions frame whole; a read takes the base without those
sessions' rows and appends the delta's, which gives the spliced frames row for row. The base is written
again when the delta grows past a share of it, or when a splice changed rows outside the re-read sessions
(a parent link appeared or vanished, so other sessions' root keys moved).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ctxtool.frames.build import assemble, without_sessions
from ctxtool.frames.model import PROBLEM_KINDS, Corpus, Problem

# The frames stored: the tool calls as read (``Corpus.calls``); their joined columns and the turns are derived
# from these when read (``frames.assemble``), so a first run neither builds nor writes them unless its report
# reads them (less memory at its peak, which is writing these).
FRAME_NAMES = ("sessions", "messages", "requests", "calls")
# Frames with rows per session; the sessions frame itself is small and always stored whole.
_ROW_FRAMES = FRAME_NAMES[1:]
# Rewrite the base once the delta holds more than this share of the rows.
DELTA_MAX_SHARE = 0.25
# Stored scans kept per cache (one per set of PATH arguments); the least recently written go first.
KEEP_SCANS = 8
# Folders and temporary files no state names are removed once this old (younger: maybe another run's).
STALE_AFTER_S = 600.0


@dataclass(frozen=True, slots=True)
class Stored:
    """Which folders hold a stored scan, and which sessions the delta holds in place of the base's rows."""

    base: str
    delta: str | None = None
    dirty: frozenset[str] = field(default_factory=frozenset)

    def names(self) -> dict[str, str | None]:
        """What the caller's state file records (``dirty`` lives in the delta's own meta.json)."""
        return {"base": self.base, "delta": self.delta}


def load(folder: Path, names: Any) -> tuple[Corpus, Stored] | None:
    """The corpus stored in ``folder`` under ``names`` (as ``Stored.names`` gave them), or None."""
    if not isinstance(names, dict) or not isinstance(names.get("base"), str):
        return None
    base_dir = folder / f"base-{names['base']}"
    delta = names.get("delta")
    delta_dir = folder / f"delta-{delta}" if isinstance(delta, str) else None
    try:
        meta = json.loads(((delta_dir or base_dir) / "meta.json").read_text(encoding="utf-8"))
        if not all(isinstance(p, list) and len(p) == 3 and p[2] in PROBLEM_KINDS for p in meta["problems"]):
            return None  # stored before a problem had a kind (unreadable, no sessions, missing): read again
        wanted = [(base_dir, n) for n in FRAME_NAMES if delta_dir is None or n != "sessions"]
        if delta_dir is not None:
            wanted += [(delta_dir, n) for n in FRAME_NAMES]
        with ThreadPoolExecutor(len(wanted)) as pool:
            read = list(pool.map(lambda w: pl.read_ipc(w[0] / f"{w[1]}.arrow"), wanted))
    except (OSError, ValueError, KeyError, pl.exceptions.PolarsError):
        return None
    got = {(d, n): df for (d, n), df in zip(wanted, read, strict=True)}
    dirty = frozenset(meta.get("dirty", ()))
    frames: dict[str, pl.DataFrame] = {}
    for name in FRAME_NAMES:
        if delta_dir is None:
            frames[name] = got[(base_dir, name)]
        elif name == "sessions":
            frames[name] = got[(delta_dir, name)]
        else:
            base = got[(base_dir, name)]
            kept = without_sessions(base, sorted(dirty))
            frames[name] = pl.concat([kept, got[(delta_dir, name)]], how="diagonal_relaxed")
    corpus = assemble(frames["sessions"], frames["messages"], frames["requests"], frames["calls"])
    corpus.files_read = meta["files_read"]
    corpus.files_found = meta["files_found"]
    corpus.bytes_read = meta["bytes_read"]
    corpus.broken_lines = meta["broken_lines"]
    corpus.problems = [Problem(path, message, kind) for path, message, kind in meta["problems"]]
    corpus.skipped = [(path, why) for path, why in meta["skipped"]]
    corpus.warnings = list(meta["warnings"])
    return corpus, Stored(names["base"], delta if isinstance(delta, str) else None, dirty)


def save(
    corpus: Corpus,
    folder: Path,
    *,
    previous: Stored | None = None,
    changed: Iterable[str] | None = None,
) -> Stored | None:
    """Write ``corpus`` into ``folder``; returns what the caller's state file must name, or None on failure.

    With ``previous`` (the stored scan ``corpus`` was spliced from) and ``changed`` (the session keys whose
    rows the splice removed or added, None when rows of other sessions moved too), only a delta is written
    while it stays small. The caller records the result, then calls ``prune`` to drop what it replaced.
    """
    token = secrets.token_hex(6)
    meta: dict[str, Any] = {
        "files_read": corpus.files_read,
        "files_found": corpus.files_found,
        "bytes_read": corpus.bytes_read,
        "broken_lines": corpus.broken_lines,
        "problems": [[p.path, p.message, p.kind] for p in corpus.problems],
        "skipped": corpus.skipped,
        "warnings": corpus.warnings,
    }
    to_write: dict[str, pl.DataFrame | None]
    if previous is not None and changed is not None:
        dirty = previous.dirty | frozenset(changed)
        keys = list(dirty)
        to_write = {"sessions": corpus.sessions}
        delta_rows = total_rows = 0
        for name in _ROW_FRAMES:
            df = _stored(getattr(corpus, name))
            rows = to_write[name] = df.filter(pl.col("session_key").is_in(keys))
            delta_rows += rows.height
            total_rows += df.height
        if delta_rows <= DELTA_MAX_SHARE * max(total_rows, 1):
            meta["dirty"] = sorted(dirty)
            target = folder / f"delta-{token}"
            if _write(target, to_write, meta):
                return Stored(previous.base, token, dirty)
            return None
    target = folder / f"base-{token}"
    if _write(target, {name: getattr(corpus, name) for name in FRAME_NAMES}, meta):
        return Stored(token)
    return None


def _write(target: Path, frames: dict[str, pl.DataFrame | None], meta: dict[str, Any]) -> bool:
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.mkdir(parents=True)
        # polars writes without the GIL: the frames go out side by side.
        with ThreadPoolExecutor(len(frames)) as pool:
            list(
                pool.map(
                    lambda item: _stored(item[1]).write_ipc(
                        tmp / f"{item[0]}.arrow", compression="uncompressed"
                    ),
                    frames.items(),
                )
            )
        (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # a read-only cache costs speed, not correctness
        return False
    return True


def _stored(frame: pl.DataFrame | None) -> pl.DataFrame:
    if frame is None:
        raise TypeError(
            "only a corpus ctxtool.frames.loading built, spliced or loaded is stored (it has calls)"
        )
    return frame


def prune(folder: Path, current: Stored, replaced: Any = None, *, keep_scans: int = KEEP_SCANS) -> None:
    """Tidy ``folder`` once the state file naming ``current`` is written: remove what the state it
    ``replaced`` named (as ``Stored.names`` gave them), and anything else ``current`` does not name once it is
    older than ``STALE_AFTER_S`` (younger, it may be another run's, written but not yet named). Also remove
    the least recently written stored scans beside ``folder`` beyond ``keep_scans``."""
    wanted = {f"base-{current.base}", *([f"delta-{current.delta}"] if current.delta else [])}
    superseded: set[str] = set()
    if isinstance(replaced, dict):
        superseded = {
            f"{kind}-{replaced[kind]}" for kind in ("base", "delta") if isinstance(replaced.get(kind), str)
        }
    now = time.time()
    try:
        for entry in folder.iterdir():
            if entry.name in wanted or entry.name == "files.json":
                continue
            if entry.suffix == ".arrow" or entry.name == "meta.json":  # the layout before deltas
                entry.unlink(missing_ok=True)
            elif entry.name in superseded or now - entry.stat().st_mtime > STALE_AFTER_S:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        scans = sorted(
            (d for d in folder.parent.iterdir() if d.is_dir() and not d.name.startswith(".")),
            key=lambda d: d.stat().st_mtime,
        )
        for old in scans[:-keep_scans]:
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)
    except OSError:
        return
