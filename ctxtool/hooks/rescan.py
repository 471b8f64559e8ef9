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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxtool.hooks import figures
from ctxtool.hooks.figures import STATE_VERSION, Running, Spend, Tally
from ctxtool.session.discover import SessionPath, default_roots, discover, file_stamps, listing_folders
from ctxtool.session.stamp import MESSAGE_COLUMNS, STAMP

if TYPE_CHECKING:
    from ctxtool.frames.grouping import _Session
    from ctxtool.hooks.figures import Transcript
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


def data_roots(transcript: Transcript) -> list[Path]:
    """Where the sessions are: the data root holding ``transcript`` first, then Gemini CLI's default roots
    (``GEMINI_CLI_HOME``), each once."""
    found = figures.transcript_root(transcript)
    seen: dict[str, Path] = {}
    for root in [*([Path(found)] if found is not None else []), *filter(Path.is_dir, default_roots())]:
        seen.setdefault(os.path.realpath(root), root)
    return list(seen.values())


def spend(
    transcript: Transcript,
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
    sessions, summed, from_frames = _group(scan, state["sessions"] if state is not None else {}, Path(cache))
    target = os.path.abspath(transcript) if transcript else None
    key_of_day = figures.figures_key(day)
    _keep_running(scan, sessions, summed, cache, key_of_day, active=state is not None, target=target)
    new = {"version": STATE_VERSION, "stamp": STAMP, "key": key, "day": day, "folders": folders,
           "files": scan.entries, "sessions": summed, "rates": scan.rates}  # fmt: skip
    figures.write_json(figures.state_file(cache, key), new)
    return figures.spend_of(new, transcript, len(scan.changed), sum(scan.resumed), from_frames)


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


def _group(scan: _Scan, old: dict[str, Any], cache_root: Path) -> tuple[list[_Session], dict[str, Any], int]:
    """The sessions, as the frames group the files; each one's figures (its file's, or, when several of its
    files hold requests, the stats engine's, kept until one of its files changes) and the session it adds to;
    and how many the stats engine summed now."""
    from ctxtool.frames.grouping import group_sessions, link_parents, parent_ref_of

    entries = scan.entries
    sessions = group_sessions([_meta_columns(sp, entries[str(sp.path)]) for sp in scan.files
                               if entries[str(sp.path)]["ok"]])  # fmt: skip
    parents = link_parents(
        (s.key, s.primary.project_dir, s.primary.session_id, parent_ref_of(s.primary)) for s in sessions
    )
    summed: dict[str, Any] = {}
    from_frames = 0
    by_path = {str(sp.path): sp for sp in scan.files}
    for s in sessions:
        for f in s.files:
            entries[f.path]["session"] = s.key
        core = [f for f in s.files if f.group_key == s.primary.group_key]
        strays = [f for f in s.files if f.group_key != s.primary.group_key]
        if len(core) == 1 and not any(entries[f.path]["tally"]["requests"] for f in strays):
            summed[s.key] = {"file": core[0].path, "tally": None, "stamps": None}
        else:
            # Several files with requests (a legacy .json and its resume): the engine merges their copies.
            member_stamps = {f.path: scan.stamps[f.path] for f in s.files}
            kept = old.get(s.key)
            if kept is None or kept.get("file") is not None or kept["stamps"] != member_stamps:
                from_frames += 1
                tally = _frames_tally([by_path[f.path] for f in s.files], cache_root)
                kept = {"file": None, "tally": tally, "stamps": member_stamps}
            summed[s.key] = {**kept}
        summed[s.key]["root"] = parents.get(s.key, s.key)
    return sessions, summed, from_frames


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


def _keep_running(
    scan: _Scan,
    sessions: list[_Session],
    summed: dict[str, Any],
    cache: str,
    key: str,
    *,
    active: bool,
    target: str | None,
) -> None:
    """Mark the files a warm call may extend by their appended records alone, and keep the running tally of
    those read now: a session of this one file, whose growth cannot regroup the sessions (no other file in
    its folder has its session id). Only files that changed since the last call (``active``), or the
    transcript's, get one: most sessions never grow again. ``key``: the figures' (``figures.figures_key``)."""
    entries, read = scan.entries, scan.read
    ids: dict[tuple[str, str | None], int] = {}
    for entry in entries.values():
        entry["quick"] = False
        if entry["ok"] and entry["session_id"] is not None:
            place = (os.path.dirname(entry["group_key"]), entry["session_id"])
            ids[place] = ids.get(place, 0) + 1
    for s in sessions:
        if len(s.files) != 1 or summed[s.key]["file"] is None:
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
        running = Running(name, key, entry["stamp"], fc.resume_offset, fc.head_hash, fc.tail_hash)
        running.rows = rows
        running.freeze(scan.rates)
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

    facts = {k: entry[k] for k in ("era", "session_id", "kind", "n_messages", "checkpoints")}
    return FileColumns(str(sp.path), sp.group_key, sp.project, sp.project_dir, sp.parent_ref, **facts)


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

    def slot(row: dict[str, Any]) -> tuple[float, int, int]:  # cost, priced, unpriced (``Tally.days``)
        return row["cost"] or 0.0, row["requests"] - row["unpriced"], row["unpriced"]

    for row in tally.session_rows(made, roll_up=False):  # (the guard adds subagents to their parents)
        mine = Tally(row["requests"], row["total"], *slot(row), row["peak_context"], row["context_limit"])
        out.add(mine, context=True)
    for row in days:
        if row["day"] is not None:
            out.days[row["day"].isoformat()] = list(slot(row))
    return out.as_dict()
