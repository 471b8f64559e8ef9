"""What a session has billed so far, and what today has billed across sessions, fast enough to ask before
every model call.

Owns: ``spend`` and the quick path of a warm call. The guard keeps a state between calls in
``<cache>/guard/<key>.json``: per session file its size and modification time, its figures and the session it
belongs to; per session the session its figures add to (a subagent's parent); the modification time of every
folder whose listing decides which files are sessions; the price tiers of the models seen. A call whose
folders are unchanged knows the session files are the same ones; files whose size and modification time are
unchanged keep their figures; a ``.jsonl`` file that only grew is read from where the last call stopped (its
running tally, ``ctxtool.hooks.figures.Running``, kept in ``<cache>/guard/files/``) and only its new records
are added up. Anything else (a new, removed or rewritten file, a rewind or checkpoint, a session spread over
several files, a new day, a model not priced yet) goes to the full tally, ``ctxtool.hooks.rescan``, which
reads what changed through ctxtool's index and writes the state again.

Imports only what ``ctxtool.hooks.figures`` imports and ``ctxtool.session.stamp``: a warm call spends most of
its time starting Python. ``tests/test_guard.py`` holds the figures to ``ctxtool stats``, through both paths.
"""

from __future__ import annotations

import os

from ctxtool.hooks import figures
from ctxtool.hooks.figures import STATE_VERSION, Running, Spend, Tally, tally_rows
from ctxtool.session.stamp import STAMP, cache_path

TYPE_CHECKING = False  # (mypy reads any name TYPE_CHECKING as typing's)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime
    from typing import Any

    from ctxtool.hooks.figures import Transcript

__all__ = ["Spend", "Tally", "spend", "tally_rows"]


def spend(
    transcript: Transcript,
    *,
    roots: Sequence[str | os.PathLike[str]] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    now: datetime | None = None,
    models: Sequence[str | None] = (),
    whole_day: bool = True,
) -> Spend:
    """The session of ``transcript`` and today's spend across every session under ``roots`` (default: the
    data root holding ``transcript`` and Gemini CLI's). ``models``: models the next records may name (the
    request's, the fallback), priced now if a full tally runs, so that their replies need none.

    ``whole_day`` False (no budget of the day's spend is set): a warm call reads only the files of the
    session ``transcript`` belongs to (its subagents included), whatever grew beside it; today's figure then
    counts the other sessions as the last call that read them left them."""
    day = figures.today(now)
    cache = cache_path(cache_dir)
    key = figures.state_key(transcript, roots)
    path = figures.state_file(cache, key)
    state = figures.read_json(path)
    state = state if _usable(state, key, day) else None
    if state is not None:
        try:
            found = _quick(state, path, cache, transcript, figures.figures_key(day), whole_day)
        except (OSError, KeyError, TypeError, ValueError, IndexError, AttributeError):
            # A file gone since it was listed, or a state or running tally of another shape: the full tally
            # finds the files again and writes them anew.
            found = None
        if found is not None:
            return found
    from ctxtool.hooks import rescan

    return rescan.spend(transcript, roots, cache, key, day, state, models=models)


def _usable(state: Any, key: str, day: str) -> bool:
    """A state this call may start from: this code's, for these roots, of today (prices are dated, so a new
    day starts over, as the index does)."""
    if not isinstance(state, dict):
        return False
    want = {"version": STATE_VERSION, "stamp": STAMP, "key": key, "day": day}
    same = all(state.get(k) == v for k, v in want.items())
    return same and all(isinstance(state.get(k), dict) for k in ("files", "sessions", "rates"))


def _quick(
    state: dict[str, Any], path: str, cache: str, transcript: Transcript, key: str, whole_day: bool = True
) -> Spend | None:
    """The spend from the state and the records appended since, or None when only the full tally can say."""
    folders = state.get("folders")
    if not isinstance(folders, dict) or any(_mtime(f) != mtime for f, mtime in folders.items()):
        return None  # a session file appeared, vanished or was renamed (or the last scan could not promise)
    files: dict[str, Any] = state["files"]
    wanted = files if whole_day else _own_files(state, transcript)
    if wanted is None:
        return None
    grown = []
    for name in wanted:
        entry = files[name]
        try:
            st = os.stat(name)
        except OSError:
            return None
        now = [st.st_size, st.st_mtime_ns]
        if now != entry["stamp"]:
            if not entry["quick"]:
                return None
            grown.append((name, now))
    rates = state["rates"]
    for name, now in grown:
        running = _grown(cache, name, key, (files[name]["stamp"], now), rates)
        if running is None:
            return None
        figures.write_json(figures.running_file(cache, name), running.to_doc())
        files[name].update(stamp=now, tally=running.tally(rates).as_dict(), n_messages=running.messages)
    if grown:
        figures.write_json(path, state)
    return figures.spend_of(state, transcript, len(grown), len(grown), 0)


def _grown(
    cache: str, name: str, key: str, stamps: tuple[list[int], list[int]], rates: dict[str, Any]
) -> Running | None:
    """The running tally of ``name`` extended by what was appended since the last call (``stamps``: the file's
    size and modification time then and now), or None when the file was not appended to (rewritten,
    truncated) or its new records need a full read."""
    was, now = stamps
    doc = figures.read_json(figures.running_file(cache, name))
    if not isinstance(doc, dict) or doc.get("path") != name or doc.get("key") != key:
        return None
    running = Running.from_doc(doc)
    if running.stamp == now:
        return running  # another call (a parallel session's guard) read it already
    offset = running.offset
    if running.stamp != was or now[0] <= offset:
        return None
    start = max(0, offset - figures.FINGERPRINT_BYTES)
    with open(name, "rb") as fh:
        head = fh.read(min(offset, figures.FINGERPRINT_BYTES))
        fh.seek(start)
        rest = fh.read()
    if figures.digest(head) != running.head or figures.digest(rest[: offset - start]) != running.tail:
        return None  # the bytes before the end of the last read changed: not an append
    if not figures.extend(running, rest[offset - start :], rates):
        return None
    end = running.offset - start
    running.tail = figures.digest(rest[max(0, end - figures.FINGERPRINT_BYTES) : end])
    if offset < figures.FINGERPRINT_BYTES:  # then ``rest`` is the whole file
        running.head = figures.digest(rest[: figures.FINGERPRINT_BYTES])
    running.stamp = now
    running.freeze(rates)
    return running


def _own_files(state: dict[str, Any], transcript: Transcript) -> list[str] | None:
    """The files of the session ``transcript`` belongs to and of its subagents (None: not in the state)."""
    files, sessions = state["files"], state["sessions"]
    target = os.path.abspath(transcript) if transcript else None
    if target is None or target not in files:
        return None
    key = files[target].get("session")
    if key not in sessions:
        return None
    root = sessions[key].get("root", key)
    mine = {k for k, s in sessions.items() if s.get("root", k) == root}
    return [name for name, entry in files.items() if entry.get("session") in mine]


def _mtime(folder: str) -> int | None:
    try:
        return os.stat(folder).st_mtime_ns
    except OSError:
        return None
