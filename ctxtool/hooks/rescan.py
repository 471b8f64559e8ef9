"""The guard's full tally: the session files under the data roots found again, those that changed since the
last call read through ctxtool's incremental index (a grown ``.jsonl`` from where the index stopped), and the
state the next call's quick path starts from (``ctxtool.hooks.ledger``).

The sessions are those of ``ctxtool stats``: the same rows (``ctxtool.session.columns``), the same grouping
and subagent attribution (``ctxtool.frames.grouping``), the same prices (``ctxtool.measure.pricing``), the
same rules of the figures (``ctxtool.measure.usage``). What this module sums by itself are single files, the
common case (a Gemini CLI 0.61 session is one ``.jsonl``): a session made of several files with requests (a
legacy ``.json`` and the ``.jsonl`` of its resume, whose messages repeat) is summed by the stats engine
(``ctxtool.frames.tally``, which merges their copies as ``stats`` does), once, and kept until one of its
files changes.

Never imports polars (polars alone takes longer to import than a guard may take; ``tests/test_guard.py``
runs a full tally in a process of its own to see it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxtool.hooks import figures
from ctxtool.hooks.figures import STATE_VERSION, Running, Spend, Tally
from ctxtool.session.discover import SessionPath, default_roots, discover, file_stamps, listing_folders
from ctxtool.session.stamp import MESSAGE_COLUMNS, STAMP

if TYPE_CHECKING:
    from ctxtool.frames.grouping import _Session
    from ctxtool.session.columns import FileColumns

# What a file's entry keeps of its columns, for grouping it into a session again.
_META = ("group_key", "project", "project_dir", "parent_ref", "era", "session_id", "kind", "n_messages",
         "checkpoints")  # fmt: skip
# A folder modified this recently may change again within the same tick of its file system's clock, which
# would leave its modification time as recorded: the quick path is not promised until it is older (git's
# "racily clean"). Two seconds cover file systems that keep whole seconds.
_RACY_NS = 2_000_000_000
# The columns the tally reads, in the order of its rows (``figures.ID`` … ``figures.LIVE``).
_TALLIED = ("message_id", "type", "timestamp", "model", "input", "cached", "output", "thoughts", "tool",
            "total", "live")  # fmt: skip
_COLUMNS = tuple(MESSAGE_COLUMNS.index(c) for c in _TALLIED)


def data_roots(transcript: str | os.PathLike[str] | None) -> list[Path]:
    """Where the sessions are: the data root holding ``transcript`` first, then Gemini CLI's default roots
    (``GEMINI_CLI_HOME``), each once."""
    roots: list[Path] = []
    found = figures.transcript_root(transcript)
    if found is not None:
        roots.append(Path(found))
    roots += [root for root in default_roots() if root.is_dir()]
    seen: set[str] = set()
    out = []
    for root in roots:
        key = os.path.realpath(root)
        if key not in seen:
            seen.add(key)
            out.append(root)
    return out


def spend(
    transcript: str | os.PathLike[str] | None,
    given: Sequence[str | os.PathLike[str]] | None,
    cache: str,
    key: str,
    day: str,
    state: dict[str, Any] | None,
    *,
    models: Sequence[str | None] = (),
) -> Spend:
    """Find the files again, read those that changed since ``state`` (the last call's, or None), group them
    into sessions, write the new state and answer. ``models`` are priced too (see ``ledger.spend``)."""
    roots = [Path(r) for r in given] if given is not None else data_roots(transcript)
    folders = _folders(roots, derived=given is None)  # before discovery: a change after it shows next time
    scan = _scan(roots, state, Path(cache), {m for m in models if m})
    sessions, sums = _group(scan, state["sessions"] if state is not None else {}, Path(cache))
    target = os.path.abspath(transcript) if transcript else None
    _keep_running(
        scan, (sessions, sums), (cache, figures.figures_key(day)), active=state is not None, target=target
    )
    entries = scan.entries
    new = {"version": STATE_VERSION, "stamp": STAMP, "key": key, "day": day, "folders": folders,
           "files": entries, "sessions": sums.sessions, "rates": scan.rates}  # fmt: skip
    figures.write_json(figures.state_file(cache, key), new)
    tallies = {
        k: s["tally"] if s["file"] is None else entries[s["file"]]["tally"] for k, s in sums.sessions.items()
    }
    owner = entries[target]["session"] if target is not None and target in entries else None
    session, today = figures.roll_up(tallies, {k: s["root"] for k, s in sums.sessions.items()}, day, owner)
    return Spend(session, today, day, target if owner is not None else None, len(scan.changed),
                 sum(scan.resumed), sums.from_frames)  # fmt: skip


@dataclass(slots=True)
class _Scan:
    """The session files found, their stamps, those that changed since the last call (read now), every
    file's entry and the price tiers of the models seen today."""

    files: list[SessionPath]
    stamps: dict[str, list[int] | None]
    changed: list[SessionPath]
    read: dict[str, tuple[dict[str, Any], FileColumns, list[list[Any]]]]
    entries: dict[str, Any]
    rates: dict[str, Any]
    resumed: list[int]


def _scan(roots: Sequence[Path], state: dict[str, Any] | None, cache_root: Path, models: set[str]) -> _Scan:
    """Find the files, read those whose size or modification time changed since ``state``, price the models
    not priced yet today (those read, and ``models``) and give every file its entry."""
    found = discover([str(r) for r in roots]) if roots else None
    files = found.files if found is not None else []
    stamps = file_stamps(found) if found is not None else {}
    old: dict[str, Any] = state["files"] if state is not None else {}
    changed = [sp for sp in files if (old.get(str(sp.path)) or {}).get("stamp") != stamps[str(sp.path)]]
    rates: dict[str, Any] = dict(state["rates"]) if state is not None else {}
    resumed: list[int] = []
    read = _read(changed, cache_root, rates, resumed) if changed else {}
    if models - set(rates):
        from ctxtool.measure.pricing import price_table

        rates.update(figures.rates_of(price_table(models - set(rates))))
    entries = {}
    for sp in files:
        path = str(sp.path)
        entries[path] = read[path][0] if path in read else old[path]
        entries[path]["stamp"] = stamps[path]
    return _Scan(files, stamps, changed, read, entries, rates, resumed)


def _group(scan: _Scan, old: dict[str, Any], cache_root: Path) -> tuple[list[_Session], _Sessions]:
    """The sessions, as the frames group the files, with their figures and the session each adds to."""
    from ctxtool.frames.grouping import group_sessions, link_parents, parent_ref_of

    entries = scan.entries
    sessions = group_sessions([_meta_columns(sp, entries[str(sp.path)]) for sp in scan.files
                               if entries[str(sp.path)]["ok"]])  # fmt: skip
    refs = {s.key: parent_ref_of(s.primary) for s in sessions}
    parents = link_parents(
        (s.key, s.primary.project_dir, s.primary.session_id, refs[s.key]) for s in sessions
    )
    sums = _tally_sessions(sessions, entries, scan.stamps, old, scan.files, cache_root)
    for s in sessions:
        sums.sessions[s.key]["root"] = parents.get(s.key, s.key)
    return sessions, sums


def _folders(roots: Sequence[Path], *, derived: bool) -> dict[str, int | None] | None:
    """The modification time of every folder whose listing decides which files are sessions (and, for data
    roots found from the environment, of each default root, None while it does not exist): None when one was
    modified too recently to promise anything (``_RACY_NS``) or could not be listed."""
    start = time.time_ns()
    listed = listing_folders(roots)
    if listed is None:
        return None
    watched = [*listed]
    if derived:
        default = default_roots()[0]
        watched += [str(default), str(default.parent.parent / ".cache" / ".gemini" / "tmp")]
    out: dict[str, int | None] = {}
    for folder in watched:
        try:
            mtime: int | None = os.stat(folder).st_mtime_ns
        except OSError:
            mtime = None
        if mtime is not None and mtime > start - _RACY_NS:
            return None
        out.setdefault(folder, mtime)
    return out


@dataclass(slots=True)
class _Sessions:
    """The sessions' figures as one call finds them: for each, the file whose figures are the session's, or
    (several files with requests) the stats engine's sum and its files' stamps; and the session it adds to."""

    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    from_frames: int = 0


def _tally_sessions(
    sessions: list[_Session],
    entries: dict[str, Any],
    stamps: dict[str, list[int] | None],
    old: dict[str, Any],
    files: list[SessionPath],
    cache_root: Path,
) -> _Sessions:
    """Each session's figures: its file's, or, when several of its files hold requests, the stats engine's
    (kept until one of its files changes)."""
    sums = _Sessions()
    by_path = {str(sp.path): sp for sp in files}
    for s in sessions:
        for f in s.files:
            entries[f.path]["session"] = s.key
        core = [f for f in s.files if f.group_key == s.primary.group_key]
        strays = [f for f in s.files if f.group_key != s.primary.group_key]
        if len(core) == 1 and not any(entries[f.path]["tally"]["requests"] for f in strays):
            sums.sessions[s.key] = {"file": core[0].path, "tally": None, "stamps": None}
            continue
        # Several files with requests (a legacy .json and its resume): the stats engine merges their copies.
        member_stamps = {f.path: stamps[f.path] for f in s.files}
        kept = old.get(s.key)
        if kept is None or kept.get("file") is not None or kept["stamps"] != member_stamps:
            sums.from_frames += 1
            summed = _frames_tally([by_path[f.path] for f in s.files], cache_root)
            kept = {"file": None, "tally": summed, "stamps": member_stamps}
        sums.sessions[s.key] = {**kept}
    return sums


def _keep_running(
    scan: _Scan,
    grouped: tuple[list[_Session], _Sessions],
    where: tuple[str, str],
    *,
    active: bool,
    target: str | None,
) -> None:
    """Mark the files a warm call may extend by their appended records alone, and keep the running tally of
    those read now: a session of this one file, whose growth cannot regroup the sessions (no other file in
    its folder has its session id). Only files that changed since the last call (``active``), or the
    transcript's, get one: most sessions never grow again. ``where``: the cache and the figures' key."""
    sessions, sums = grouped
    cache, key = where
    entries, read = scan.entries, scan.read
    ids: dict[tuple[str, str | None], int] = {}
    for entry in entries.values():
        if entry["ok"] and entry["session_id"] is not None:
            place = (os.path.dirname(entry["group_key"]), entry["session_id"])
            ids[place] = ids.get(place, 0) + 1
    for entry in entries.values():
        entry["quick"] = False
    for s in sessions:
        if len(s.files) != 1 or sums.sessions[s.key]["file"] is None:
            continue
        name = s.files[0].path
        entry = entries[name]
        if ids.get((os.path.dirname(entry["group_key"]), entry["session_id"]), 0) > 1:
            continue
        entry["quick"] = True
        if name not in read or not (active or name == target):
            continue
        _, fc, rows = read[name]
        if fc.resume_offset is None or fc.head_hash is None or fc.tail_hash is None:
            continue
        mark = (fc.resume_offset, fc.head_hash, fc.tail_hash)
        running = Running.of_rows(name, key, entry["stamp"], mark, rows, scan.rates)
        figures.write_json(figures.running_file(cache, name), running.to_doc())


def _read(
    changed: Sequence[SessionPath], cache_root: Path, rates: dict[str, Any], resumed: list[int]
) -> dict[str, tuple[dict[str, Any], FileColumns, list[list[Any]]]]:
    """Read ``changed`` through the index (a grown JSONL from where it ended), price the models not priced yet
    today (into ``rates``) and tally each file."""
    from ctxtool.session.index import FileIndex
    from ctxtool.session.scan import read_files

    index = FileIndex(cache_root)
    results = read_files(changed, workers=1, index=index)
    resumed.append(index.resumed)
    rows = {fc.path: _rows(fc) for fc in results if not fc.error}
    needed = {m for file_rows in rows.values() for m in figures.models_of(file_rows)} - set(rates)
    if needed:
        from ctxtool.measure.pricing import price_table

        rates.update(figures.rates_of(price_table(needed)))
    out = {}
    for fc in results:
        entry: dict[str, Any] = {"ok": not fc.error, **{k: getattr(fc, k) for k in _META}}
        entry["tally"] = figures.tally_rows(rows.get(fc.path, []), rates).as_dict()
        out[fc.path] = (entry, fc, rows.get(fc.path, []))
    return out


def _rows(fc: FileColumns) -> list[list[Any]]:
    """A file's message rows as the tally reads them (``figures.ID`` … ``figures.LIVE``)."""
    from ctxtool.session.columns import decode_columns

    out: list[list[Any]] = []
    for chunk in fc.messages_cols:
        columns = decode_columns(chunk)
        out.extend(map(list, zip(*(columns[i] for i in _COLUMNS), strict=True)))
    return out


def _meta_columns(sp: SessionPath, entry: dict[str, Any]) -> FileColumns:
    """A file's facts for grouping (no rows), as ``ctxtool.frames.grouping`` takes them."""
    from ctxtool.session.columns import FileColumns

    return FileColumns(
        path=str(sp.path),
        group_key=sp.group_key,
        project=sp.project,
        project_dir=sp.project_dir,
        parent_ref=sp.parent_ref,
        era=entry["era"],
        session_id=entry["session_id"],
        kind=entry["kind"],
        n_messages=entry["n_messages"],
        checkpoints=entry["checkpoints"],
    )


def _frames_tally(files: Sequence[SessionPath], cache_root: Path) -> dict[str, Any]:
    """One session of several files, summed by the stats engine without polars (``ctxtool.frames.tally``
    merges the copies its files share, as ``stats`` does): its row of ``--by session`` and its rows of
    ``--by day``."""
    from ctxtool.frames import tally
    from ctxtool.measure.pricing import price_table
    from ctxtool.session.index import FileIndex
    from ctxtool.session.scan import read_files

    made = tally.tally(read_files(files, workers=1, index=FileIndex(cache_root)), None, price_table)
    days = tally.request_rows(made, "day")
    out = Tally()
    for row in tally.session_rows(made, roll_up=False):  # (the guard adds subagents to their parents)
        mine = Tally(
            requests=row["requests"],
            total=row["total"],
            cost=row["cost"] or 0.0,
            priced=row["requests"] - row["unpriced"],
            unpriced=row["unpriced"],
            peak_live=row["peak_context"],
            limit=row["context_limit"],
        )
        out.add(mine, context=True)
    for row in days:
        if row["day"] is not None:
            out.days[row["day"].isoformat()] = [
                row["cost"] or 0.0,
                row["requests"] - row["unpriced"],
                row["unpriced"],
            ]
    return out.as_dict()
