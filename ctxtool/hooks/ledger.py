"""What a session has billed so far, and what today has billed across sessions, fast enough to ask before
every model call.

Owns: the guard's tally of Gemini CLI's data root, kept between calls in ``<cache>/guard/<key>.json``, per
file (its size and modification time, the facts that group it into a session, its billed figures). A call
re-reads only the files that changed since the last one, through ctxtool's incremental index (a session
Gemini CLI appended to is read from where it ended: ``ctxtool.session.columns``), and re-tallies only them.

The figures are those of ``ctxtool stats``: the same rows (``ctxtool.session.columns``), the same session
grouping and subagent attribution (``ctxtool.frames.grouping``), the same prices (``ctxtool.measure.pricing``
``cost_of``, which follows ``add_costs``). A request is a ``gemini`` message with token counts (every one
recorded: the billed view); one recorded without a model takes the model of the request before it in the
session, else after (``frames.build._derive``); a session's cost sums its requests of known price (None when
it has requests and none is priced); its context share is its largest live prompt over the model's window;
subagents add to the session they belong to; a day is a UTC day. What this module sums by itself are single
files, the common case (a Gemini CLI 0.61 session is one ``.jsonl``): a session made of several files with
requests (a legacy ``.json`` and the ``.jsonl`` of its resume, whose messages repeat) is summed by the
frames themselves, once, and kept until one of its files changes. ``tests/test_guard.py`` holds this module's
figures to ``ctxtool stats`` on fixtures, real sessions and sessions the real Gemini CLI wrote.

Must not import polars on its common path (polars alone takes longer to import than a guard may take).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ctxtool.session import stamp
from ctxtool.session.discover import SessionPath, default_roots, discover, file_stamps

if TYPE_CHECKING:
    from ctxtool.frames.grouping import _Session
    from ctxtool.measure.pricing import PriceTable
    from ctxtool.session.columns import FileColumns

# Bump when what the state file holds changes meaning.
_STATE_VERSION = 1
_META = (
    "group_key",
    "project",
    "project_dir",
    "parent_ref",
    "era",
    "session_id",
    "n_messages",
    "checkpoints",
)


@dataclass(slots=True)
class Tally:
    """Billed figures of a file, a session or a set of sessions."""

    requests: int = 0
    total: int = 0
    cost: float = 0.0  # of the requests of known price
    priced: int = 0
    unpriced: int = 0  # requests whose model has no known price
    peak_live: int | None = None  # the largest prompt of a live request
    limit: int = 0  # the largest context window of the models used
    days: dict[str, list[float]] = field(default_factory=dict)  # UTC day -> [cost, priced, unpriced]
    unknown_models: list[str] = field(default_factory=list)

    @property
    def known_cost(self) -> float | None:
        """The cost as ``stats`` shows it: None only when there are requests and none has a price."""
        return None if self.priced == 0 and self.unpriced > 0 else self.cost

    @property
    def context_share(self) -> float | None:
        from ctxtool.measure.tokens import DEFAULT_TOKEN_LIMIT

        if self.peak_live is None:
            return None
        return self.peak_live / (self.limit or DEFAULT_TOKEN_LIMIT)

    def day_cost(self, day: str) -> float | None:
        cost, priced, unpriced = self.days.get(day, (0.0, 0, 0))
        return None if priced == 0 and unpriced > 0 else cost

    def add(self, other: Tally, *, context: bool = False) -> None:
        """Add ``other``'s billed figures; its context only with ``context`` (a subagent's does not count)."""
        self.requests += other.requests
        self.total += other.total
        self.cost += other.cost
        self.priced += other.priced
        self.unpriced += other.unpriced
        for day, (cost, priced, unpriced) in other.days.items():
            mine = self.days.setdefault(day, [0.0, 0, 0])
            mine[0] += cost
            mine[1] += priced
            mine[2] += unpriced
        self.unknown_models = sorted({*self.unknown_models, *other.unknown_models})
        if context:
            if other.peak_live is not None:
                self.peak_live = max(self.peak_live or 0, other.peak_live)
            self.limit = max(self.limit, other.limit)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "total": self.total,
            "cost": self.cost,
            "priced": self.priced,
            "unpriced": self.unpriced,
            "peak_live": self.peak_live,
            "limit": self.limit,
            "days": self.days,
            "unknown_models": self.unknown_models,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Tally:
        return cls(**doc)


@dataclass(slots=True)
class Spend:
    """What the guard compares with its budgets."""

    session: Tally  # the session of the transcript, its subagents included
    today: Tally  # every session's requests of ``day``
    day: str
    session_file: str | None  # the file the transcript belongs to (None: not found under the data root)
    files_read: int = 0  # files read (or resumed) by this call; the rest came from the state
    files_resumed: int = 0  # of those, grown JSONL files read from where they ended (only the new bytes)
    from_frames: int = 0  # sessions summed by the frames (several files with requests)

    @property
    def day_cost(self) -> float | None:
        return self.today.day_cost(self.day)


def data_roots(transcript: str | Path | None) -> list[Path]:
    """Where the sessions are: the data root holding ``transcript`` (``<root>/<project>/chats/…``) first, then
    Gemini CLI's default roots (``GEMINI_CLI_HOME``), each once."""
    roots: list[Path] = []
    if transcript:
        path = Path(os.path.abspath(transcript))
        for up in path.parents:
            if up.name == "chats" and up.parent != up:
                roots.append(up.parent.parent)
                break
    for root in default_roots():
        if root.is_dir():
            roots.append(root)
    seen: set[str] = set()
    out = []
    for root in roots:
        key = os.path.realpath(root)
        if key not in seen:
            seen.add(key)
            out.append(root)
    return out


def spend(
    transcript: str | Path | None,
    *,
    roots: Sequence[Path] | None = None,
    cache_dir: str | Path | None = None,
    now: datetime | None = None,
) -> Spend:
    """The session of ``transcript`` and today's spend across every session under ``roots``."""
    from ctxtool.frames.grouping import group_sessions, link_parents

    roots = list(roots) if roots is not None else data_roots(transcript)
    day = (now or datetime.now(tz=UTC)).astimezone(UTC).date().isoformat()
    cache_root = stamp.cache_root(cache_dir)
    state_path = _state_path(cache_root, roots)
    state = _read_state(state_path, day)
    found = discover([str(r) for r in roots]) if roots else None
    files = found.files if found is not None else []
    stamps = file_stamps(found) if found is not None else {}
    old_files: dict[str, Any] = state["files"]
    changed = [sp for sp in files if (old_files.get(str(sp.path)) or {}).get("stamp") != stamps[str(sp.path)]]
    resumed: list[int] = []
    read = _read(changed, cache_root, resumed) if changed else {}
    entries: dict[str, Any] = {}
    for sp in files:
        path = str(sp.path)
        if path in read:
            entries[path] = read[path][1]
            entries[path]["stamp"] = stamps[path]
        else:
            entries[path] = old_files[path]
    metas = [_meta_columns(sp, entries[str(sp.path)]) for sp in files if entries[str(sp.path)]["ok"]]
    sessions = group_sessions(metas)
    parents = link_parents(
        (s.key, s.primary.project_dir, s.primary.session_id, s.primary.parent_ref) for s in sessions
    )
    sums = _tally_sessions(sessions, entries, stamps, state["merged"], files, cache_root)

    target = os.path.abspath(transcript) if transcript else None
    session, today = _session_and_day(sums, parents, day, target)
    if changed or sums.merged != state["merged"] or set(old_files) != set(entries):
        _write_state(state_path, {"version": _STATE_VERSION, "stamp": stamp.STAMP, "day": day,
                                  "files": entries, "merged": sums.merged})  # fmt: skip
    return Spend(
        session=session,
        today=today,
        day=day,
        session_file=target if target in sums.owner else None,
        files_read=len(changed),
        files_resumed=sum(resumed),
        from_frames=sums.from_frames,
    )


@dataclass(slots=True)
class _Sessions:
    """The sessions' billed figures as one call finds them, and which session each file belongs to."""

    tallies: dict[str, Tally] = field(default_factory=dict)  # session key -> its own figures
    owner: dict[str, str] = field(default_factory=dict)  # file -> session key
    merged: dict[str, Any] = field(default_factory=dict)  # session key -> its files' stamps and tally
    from_frames: int = 0


def _tally_sessions(
    sessions: list[_Session],
    entries: dict[str, Any],
    stamps: dict[str, list[int] | None],
    old_merged: dict[str, Any],
    files: list[SessionPath],
    cache_root: Path,
) -> _Sessions:
    """Each session's figures: its file's tally, or, when several of its files hold requests, the frames'
    (kept in ``merged`` until one of its files changes)."""
    sums = _Sessions()
    by_path = {str(sp.path): sp for sp in files}
    for s in sessions:
        for f in s.files:
            sums.owner[f.path] = s.key
        core = [f for f in s.files if f.group_key == s.primary.group_key]
        strays = [f for f in s.files if f.group_key != s.primary.group_key]
        if len(core) == 1 and not any(entries[f.path]["tally"]["requests"] for f in strays):
            sums.tallies[s.key] = Tally.from_dict(entries[core[0].path]["tally"])
            continue
        # Several files with requests (a legacy .json and its resume): the frames merge their copies.
        member_stamps = {f.path: stamps[f.path] for f in s.files}
        kept = old_merged.get(s.key)
        if kept is None or kept["stamps"] != member_stamps:
            sums.from_frames += 1
            kept = {
                "stamps": member_stamps,
                "tally": _frames_tally([by_path[f.path] for f in s.files], cache_root),
            }
        sums.merged[s.key] = kept
        sums.tallies[s.key] = Tally.from_dict(kept["tally"])
    return sums


def _session_and_day(
    sums: _Sessions, parents: dict[str, str], day: str, target: str | None
) -> tuple[Tally, Tally]:
    """The session of the file ``target`` with its subagents, and every session's requests of ``day``."""
    rolled: dict[str, Tally] = {}
    for key, tally in sums.tallies.items():
        root = parents.get(key, key)
        rolled.setdefault(root, Tally()).add(tally, context=root == key)
    today = Tally()
    for tally in sums.tallies.values():
        today.add(Tally(days={day: tally.days[day]}) if day in tally.days else Tally())
    session = Tally()
    if target is not None and target in sums.owner:
        key = sums.owner[target]
        session = rolled.get(parents.get(key, key), Tally())
    return session, today


def _state_path(cache_root: Path, roots: Sequence[Path]) -> Path:
    key = hashlib.blake2b(
        repr(sorted(os.path.abspath(r) for r in roots)).encode(), digest_size=12
    ).hexdigest()
    return cache_root / "guard" / f"{key}.json"


def _read_state(path: Path, day: str) -> dict[str, Any]:
    empty: dict[str, Any] = {"files": {}, "merged": {}}
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return empty
    # Prices are dated (``price_table`` resolves today's rates), so a new day starts over, as the index does.
    if (
        not isinstance(doc, dict)
        or doc.get("version") != _STATE_VERSION
        or doc.get("stamp") != stamp.STAMP
        or doc.get("day") != day
        or not isinstance(doc.get("files"), dict)
        or not isinstance(doc.get("merged"), dict)
    ):
        return empty
    return doc


def _write_state(path: Path, doc: dict[str, Any]) -> None:
    """Replace the state atomically, unsynced: it is a cache (a lost one is rebuilt from the index), and an
    fsync before every model call costs more than the rest of a warm call (as ``loading._save``)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(orjson.dumps(doc))
        os.replace(tmp, path)
    except OSError:
        return  # a read-only cache costs speed, never an answer


def _read(
    changed: Sequence[SessionPath], cache_root: Path, resumed: list[int]
) -> dict[str, tuple[FileColumns, dict[str, Any]]]:
    """Read ``changed`` through the index (a grown JSONL from where it ended) and tally each file."""
    from ctxtool.session.index import FileIndex
    from ctxtool.session.scan import read_files

    index = FileIndex(cache_root)
    results = read_files(changed, workers=1, index=index)
    resumed.append(index.resumed)
    rows = {fc.path: _rows(fc) for fc in results if not fc.error}
    table = _prices(row[_MODEL] for fc_rows in rows.values() for row in fc_rows)
    out = {}
    for fc in results:
        entry: dict[str, Any] = {"ok": not fc.error, **{k: getattr(fc, k) for k in _META}}
        entry["tally"] = tally_rows(rows.get(fc.path, []), table).as_dict()
        out[fc.path] = (fc, entry)
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
        n_messages=entry["n_messages"],
        checkpoints=entry["checkpoints"],
    )


def _rows(fc: FileColumns) -> list[tuple[Any, ...]]:
    from ctxtool.session.columns import decode_rows

    return decode_rows(fc.messages_cols)


def _column(name: str) -> int:
    return stamp.MESSAGE_COLUMNS.index(name)


_TYPE, _LIVE, _MODEL, _TIME = _column("type"), _column("live"), _column("model"), _column("timestamp")
_TOKENS = tuple(_column(k) for k in ("input", "cached", "output", "thoughts", "tool", "total"))


def _prices(models: Iterable[str | None]) -> PriceTable:
    from ctxtool.measure.pricing import price_table

    return price_table({m for m in models if m})


def tally_rows(rows: Sequence[tuple[Any, ...]], table: PriceTable) -> Tally:
    """The billed figures of one session's message rows (in the order the file recorded them)."""
    from ctxtool.measure.pricing import cost_of
    from ctxtool.measure.tokens import token_limit

    requests = [r for r in rows if r[_TYPE] == "gemini" and r[_TOKENS[0]] is not None]
    # A request recorded without a model: the model of the request before it, else after (frames.build).
    models: list[str | None] = []
    last: str | None = None
    for r in requests:
        last = r[_MODEL] if r[_MODEL] is not None else last
        models.append(last)
    following: str | None = None
    for i in range(len(models) - 1, -1, -1):
        if requests[i][_MODEL] is not None:
            following = requests[i][_MODEL]
        if models[i] is None:
            models[i] = following
    out = Tally()
    unknown: set[str] = set()
    for r, model in zip(requests, models, strict=True):
        inp, cached, output, thoughts, tool, total = (r[i] for i in _TOKENS)
        cost = cost_of(table.rates.get(model) if model else None, inp, cached, output, thoughts, tool)
        out.requests += 1
        out.total += total
        day = _day(r[_TIME])
        slot = out.days.setdefault(day, [0.0, 0, 0]) if day is not None else [0.0, 0, 0]
        if cost is None:
            out.unpriced += 1
            slot[2] += 1
            unknown.add(model or "(no model)")
        else:
            out.cost += cost
            out.priced += 1
            slot[0] += cost
            slot[1] += 1
        out.limit = max(out.limit, token_limit(model))
        if r[_LIVE]:
            out.peak_live = inp if out.peak_live is None else max(out.peak_live, inp)
    out.unknown_models = sorted(unknown)
    return out


def _day(timestamp: str | None) -> str | None:
    """The UTC day of a recorded time (``frames.model.parse_times``: ISO 8601, naive meaning UTC)."""
    if not timestamp:
        return None
    try:
        when = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    if when.tzinfo is None:
        return when.date().isoformat()
    return when.astimezone(UTC).date().isoformat()


def _frames_tally(files: Sequence[SessionPath], cache_root: Path) -> dict[str, Any]:
    """One session of several files, summed by the frames (they merge the copies its files share)."""
    from ctxtool import frames
    from ctxtool.session.index import FileIndex
    from ctxtool.session.scan import read_files

    corpus = frames.build_corpus(read_files(files, workers=1, index=FileIndex(cache_root)))
    out = Tally()
    for row in corpus.sessions.iter_rows(named=True):
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
    for row in frames.report(corpus, "day").iter_rows(named=True):
        if row["day"] is not None:
            out.days[row["day"].isoformat()] = [
                row["cost"] or 0.0,
                row["requests"] - row["unpriced"],
                row["unpriced"],
            ]
    return out.as_dict()
