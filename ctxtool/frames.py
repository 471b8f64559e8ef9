"""Sessions, messages, requests, tool calls and turns as polars frames, and the reports built from them.

Owns: parsing many files in worker processes, session identity (a legacy ``.json`` and the ``.jsonl`` written
when it was resumed are one session; files sharing a constant ``sessionId`` such as ``a2a-server`` are not),
subagent attribution, turns, token semantics and the ``--by`` aggregations. Never prints.

Token semantics (chatRecordingTypes.ts): ``input`` is the request's whole prompt and already includes
``cached``; ``total = input + output + thoughts + tool``, or the recorded total when it is above 0
(``ctxtool.tokens.request_total``). Token sums use the **billed** view (every request
recorded, rewound or checkpointed away included); context figures use the **live** view.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import polars as pl

if TYPE_CHECKING:
    from ctxtool.pricing import PriceTable
    from ctxtool.session.columns import FileColumns

from ctxtool.session.discover import Discovery, discover, short_id_of
from ctxtool.session.schema import TOKEN_KEYS
from ctxtool.session.stamp import MESSAGE_COLUMNS, TOOL_COLUMNS
from ctxtool.tokens import DEFAULT_TOKEN_LIMIT, MODEL_LIMITS, TOTAL_PARTS, describe_total_mismatches
from ctxtool.wording import plural

# 2: input excludes cached (prompt_tokens has both), models is a list. 3: one accounting (ctxtool.tokens): a
# total recorded as 0 counts its parts; diff's recorded figures are stats' (input without cached,
# prompt_tokens); read.total_mismatches.
SCHEMA_VERSION = 3
from ctxtool.choices import BY_CHOICES  # noqa: E402  (re-exported)

TOKEN_COLUMNS = TOKEN_KEYS  # the counts of a request, as Gemini CLI names them
Progress = Callable[[int, int], None]


# What went wrong with a path: a file that could not be read, a folder that holds no session file, or a
# PATH argument that matches no file at all. Only the first is an unreadable file; the JSON and the
# captions count the three apart.
ProblemKind = Literal["unreadable", "no_sessions", "missing"]
PROBLEM_KINDS: tuple[ProblemKind, ...] = ("unreadable", "no_sessions", "missing")


@dataclass(slots=True)
class Problem:
    path: str
    message: str
    kind: ProblemKind = "unreadable"

    def __str__(self) -> str:
        """One line naming the file (messages that already start with the path are not prefixed again)."""
        return self.message if self.message.startswith(self.path) else f"{self.path}: {self.message}"


class _Later:
    """A frame field that may be given as a function that computes the frame, run when it is first read.

    Reports that never read a frame (``stats --by session`` reads neither turns nor tool calls) skip the
    work of building it; anything that reads it gets the same frame as if it had been built at once.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = "_" + name

    def __get__(self, obj: object, objtype: type | None = None) -> pl.DataFrame:
        if obj is None:
            raise AttributeError(self._name)  # no default: the field must be given
        value: pl.DataFrame | Callable[[], pl.DataFrame] = obj.__dict__[self._name]
        if not isinstance(value, pl.DataFrame):
            value = obj.__dict__[self._name] = value()
        return value

    def __set__(self, obj: object, value: pl.DataFrame | Callable[[], pl.DataFrame]) -> None:
        obj.__dict__[self._name] = value


@dataclass
class Corpus:
    """What was read: the frames plus an account of every file."""

    sessions: pl.DataFrame
    messages: pl.DataFrame
    requests: pl.DataFrame
    tool_calls: _Later = _Later()
    turns: _Later = _Later()
    files_read: int = 0
    files_found: int = 0
    bytes_read: int = 0
    problems: list[Problem] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    broken_lines: int = 0
    # Per-file facts kept with a stored corpus (see ctxtool.loading); not part of the frames.
    file_records: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The tool-call rows as read (``tool_calls`` without the turn and session columns joined on): what a
    # stored corpus keeps, the rest being derived again when read. None for a corpus made otherwise (a
    # filtered or live view), which is never stored.
    calls: pl.DataFrame | None = None


def load(
    paths: Sequence[str | Path],
    *,
    subagents: bool = True,
    progress: Progress | None = None,
    workers: int | None = None,
) -> Corpus:
    """Find, read and flatten every session under ``paths`` into frames."""
    from ctxtool.session.scan import read_files

    found = discover(paths, subagents=subagents)
    results = read_files(found.files, progress=progress, workers=workers)
    return build_corpus(results, found, subagents=subagents)


def warm_up(*, price_memo: bool = True) -> None:
    """Load what building frames needs (price data), so it can overlap with parsing."""
    from ctxtool.pricing import warm_up as warm_prices

    warm_prices(memo=price_memo)


_MESSAGE_SCHEMA: dict[str, Any] = {
    "message_id": pl.String,
    "type": pl.String,
    "timestamp": pl.String,
    "live": pl.Boolean,
    "text_chars": pl.Int64,
    "content_bytes": pl.Int64,
    "is_prompt": pl.Boolean,
    "is_command": pl.Boolean,
    "is_snapshot": pl.Boolean,
    "compression_info": pl.Boolean,
    "model": pl.String,
    "preview": pl.String,
    "tool_calls": pl.Int64,
    "tool_errors": pl.Int64,
    **dict.fromkeys(TOKEN_COLUMNS, pl.Int64),
    **dict.fromkeys(MESSAGE_COLUMNS[-8:], pl.Int64),
}
_TOOL_SCHEMA: dict[str, Any] = {
    "message_id": pl.String,
    "call_id": pl.String,
    "name": pl.String,
    "status": pl.String,
    "timestamp": pl.String,
    "result_bytes": pl.Int64,
    "target": pl.String,
}
assert tuple(_MESSAGE_SCHEMA) == MESSAGE_COLUMNS
assert tuple(_TOOL_SCHEMA) == TOOL_COLUMNS


_SESSION_META_SCHEMA: dict[str, Any] = {
    "session_key": pl.String,
    "group_key": pl.String,
    "parent_ref": pl.String,
    "session": pl.String,
    "session_id": pl.String,
    "project": pl.String,
    "project_dir": pl.String,
    "project_hash": pl.String,
    "kind": pl.String,
    "parent_session_key": pl.String,
    "root_session_key": pl.String,
    "file": pl.String,
    "files": pl.Int64,
    "era": pl.String,
    "summary": pl.String,
    "derived_from": pl.String,
    "start_time": pl.String,
    "last_updated": pl.String,
    "broken_lines": pl.Int64,
    "invalid_utf8_lines": pl.Int64,
    "first_invalid_utf8_line": pl.Int64,
    "first_broken_line": pl.Int64,
    "rewinds": pl.Int64,
    "checkpoints": pl.Int64,
    "live_messages": pl.Int64,
}


# A parent reference that is a short id (a legacy flat subagent's, see ``short_id_of``): matched as a prefix.
_SHORT_REF = re.compile(r"[a-zA-Z0-9]{8}")


def link_parents(sessions: Iterable[tuple[str, str, str | None, str | None]]) -> dict[str, str]:
    """Parent session key of each subagent session: (key, project_dir, session_id, parent_ref) in, key -> key.

    A nested file ``chats/<parent-id>/<id>.json[l]`` belongs to the session whose id is ``<parent-id>`` in
    the same project; ``chats/skill-extraction-<8hex>/`` to the session whose id starts with those 8 hex; a
    legacy flat subagent file ``chats/session-<time>-<id8>.json[l]`` (its ``parent_ref`` is that short id,
    see ``build_corpus``) to the session whose id starts with ``<id8>``, as Gemini CLI's ``deleteSession``
    finds it (``short_id_of``).
    """
    rows = list(sessions)
    by_id: dict[tuple[str, str], str] = {}
    for key, project_dir, session_id, parent_ref in rows:
        if session_id and parent_ref is None:
            by_id.setdefault((project_dir, session_id), key)
    by_project: dict[str, list[tuple[str, str]]] | None = None  # (id, key) per project, made when needed
    out: dict[str, str] = {}
    for key, project_dir, _sid, parent_ref in rows:
        if parent_ref is None:
            continue
        parent = by_id.get((project_dir, parent_ref))
        prefix = (
            parent_ref.removeprefix("skill-extraction-")
            if parent_ref.startswith("skill-extraction-")
            else parent_ref
            if _SHORT_REF.fullmatch(parent_ref)
            else None
        )
        if parent is None and prefix is not None:
            if by_project is None:
                by_project = {}
                for (proj, sid), k in by_id.items():
                    by_project.setdefault(proj, []).append((sid, k))
            parent = next((k for sid, k in by_project.get(project_dir, ()) if sid.startswith(prefix)), None)
        if parent is not None:
            out[key] = parent
    return out


def splice(cached: Corpus, fresh: Corpus, groups: set[str]) -> tuple[Corpus, frozenset[str] | None]:
    """``cached`` with the sessions of file ``groups`` replaced by ``fresh`` (which holds just those groups).

    Parent links, root keys and subagent counts are recomputed over the whole result, so a session that
    appeared, vanished or changed is attributed exactly as a full build would attribute it. Also returns the
    keys of the sessions whose rows were removed or added, or None when rows of other sessions changed too
    (their root keys moved because a parent appeared or vanished).
    """
    gone = cached.sessions.filter(pl.col("group_key").is_in(list(groups))).get_column("session_key")
    keep = pl.col("session_key").is_in(gone.implode()).not_()
    sessions = pl.concat([cached.sessions.filter(keep), fresh.sessions], how="diagonal_relaxed")
    parents = link_parents(
        sessions.select("session_key", "project_dir", "session_id", "parent_ref").iter_rows()
    )
    keys = sessions.get_column("session_key").to_list()
    parent_col = [parents.get(k) for k in keys]
    root = pl.DataFrame(
        {"session_key": keys, "root_session_key": [p or k for p, k in zip(parent_col, keys, strict=True)]},
        schema={"session_key": pl.String, "root_session_key": pl.String},
    )
    sessions = sessions.with_columns(
        parent_session_key=pl.Series(parent_col, dtype=pl.String),
        root_session_key=root.get_column("root_session_key"),
    ).drop("subagents")
    children = (
        sessions.filter(pl.col("parent_session_key").is_not_null())
        .group_by("parent_session_key")
        .agg(pl.len().alias("subagents"))
    )
    sessions = sessions.join(
        children, left_on="session_key", right_on="parent_session_key", how="left", maintain_order="left"
    )
    sessions = sessions.with_columns(pl.col("subagents").fill_null(0))

    # Rows already stored keep their root key unless a parent link changed (a parent session appeared or
    # vanished): only then is the key joined in again (the common case, a session grew, skips it).
    before = dict(cached.sessions.select("session_key", "root_session_key").iter_rows())
    relinked = any(before.get(k, r) != r for k, r in root.iter_rows())

    def with_root(df: pl.DataFrame) -> pl.DataFrame:
        return (
            df.drop("root_session_key")
            .join(root, on="session_key", how="left", maintain_order="left")
            .select(df.columns)
        )

    gone_keys = gone.to_list()

    def rejoin(old: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
        old = without_sessions(old, gone_keys)
        if "root_session_key" in old.columns:
            # The re-read sessions were built alone: their root keys always come from the whole.
            new = with_root(new)
            old = with_root(old) if relinked else old
        return pl.concat([old, new], how="diagonal_relaxed")

    warnings = list(dict.fromkeys([*cached.warnings, *fresh.warnings]))
    assert cached.calls is not None  # built or stored
    assert fresh.calls is not None
    spliced = assemble(
        sessions.select(cached.sessions.columns),
        rejoin(cached.messages, fresh.messages),
        rejoin(cached.requests, fresh.requests),
        rejoin(cached.calls, fresh.calls),
        warnings=warnings,
    )
    changed = None if relinked else frozenset([*gone_keys, *fresh.sessions.get_column("session_key")])
    return spliced, changed


# Past this many runs of kept rows, removing sessions copies the rows instead of slicing around them.
_MAX_SLICES = 64


def without_sessions(df: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """``df`` without the rows of the sessions ``keys``.

    A session's rows are contiguous (frames are built and spliced a session at a time), so the rows kept are
    a few runs of ``df``: those are sliced out, which copies nothing, where a filter would copy every row.
    """
    if not keys or df.height == 0:
        return df
    dropped = df.get_column("session_key").is_in(list(keys)).arg_true().to_list()
    if not dropped:
        return df
    runs: list[tuple[int, int]] = []
    start = 0
    for i in dropped:
        if i > start:
            runs.append((start, i))
            if len(runs) > _MAX_SLICES:
                return df.filter(pl.col("session_key").is_in(list(keys)).not_())
        start = i + 1
    if start < df.height:
        runs.append((start, df.height))
    if not runs:
        return df.clear()
    return pl.concat([df.slice(a, b - a) for a, b in runs], rechunk=False)


@dataclass(slots=True)
class _Session:
    key: str
    files: list[FileColumns]

    @property
    def primary(self) -> FileColumns:
        return self.files[-1]


def session_key(where: str) -> str:
    """A session's key: 12 hex digits of a hash of its file (or .json/.jsonl pair) path.

    Short on purpose: it is repeated on every row of every frame, and polars stores strings of up to 12
    bytes inline. 48 bits make a collision unlikely below millions of sessions; ``file`` names the place.
    """
    import hashlib

    return hashlib.blake2b(where.encode("utf-8"), digest_size=6).hexdigest()


def _parent_ref(primary: FileColumns) -> str | None:
    """What names a session's parent: the folder of a nested subagent file (``chats/<parent-id>/``), or the
    short id in the name of a legacy flat subagent file (``kind: "subagent"``, ``chats/session-*-<id8>``),
    which Gemini CLI's ``deleteSession`` takes as the parent's (see ``short_id_of``)."""
    if primary.parent_ref is not None or primary.kind != "subagent":
        return primary.parent_ref
    return short_id_of(os.path.basename(primary.path))


def _group_sessions(results: list[FileColumns]) -> list[_Session]:
    """Pair session-X.json with the session-X.jsonl Gemini CLI wrote on resume; everything else is its own,
    but for the stray files of resumes (``_resume_strays``), which join the session they belong to."""
    groups: dict[str, list[FileColumns]] = {}
    for fc in results:
        groups.setdefault(fc.group_key, []).append(fc)
    strays = _resume_strays(groups)
    sessions = []
    for key, members in groups.items():
        # .json before .jsonl: the .jsonl is the later copy and the one Gemini CLI resumes.
        members.sort(key=lambda f: (f.era != "json", f.path))
        ids = {m.session_id for m in members}
        if len(members) > 1 and len(ids) == 1:
            sessions.append(_Session(session_key(key), [*strays.get(key, []), *members]))
        elif len(members) == 1:
            sessions.append(_Session(session_key(members[0].path), [*strays.get(key, []), *members]))
        else:
            sessions.extend(_Session(session_key(m.path), [m]) for m in members)
    return sessions


def _resume_strays(groups: dict[str, list[FileColumns]]) -> dict[str, list[FileColumns]]:
    """Files a resume left behind, by the group key of the session they belong to; removed from ``groups``.

    On ``--resume``, Gemini CLI 0.61.0 first starts a new session file named for the current minute (a
    metadata line and ``$set.messages`` with the environment message alone) and then switches to the
    resumed one, which carries the same session id (gemini.tsx startup, then chatRecordingService.ts
    ``initialize`` with ``resumedSessionData``). When the minute differs from the resumed file's, that start
    stays behind as a file of its own: one message, set by a checkpoint, and the session id of a fuller file
    in the same folder. It is part of that session (its rows merge away as copies), not a session of its
    own. (Files that merely share an id, such as a2a-server sessions, are not strays: no checkpoint.)
    """
    owners: dict[tuple[str, str], tuple[int, str]] = {}
    for key, members in groups.items():
        for m in members:
            if m.session_id is not None:
                place = (os.path.dirname(m.path), m.session_id)
                best = owners.get(place)
                if best is None or m.n_messages > best[0]:
                    owners[place] = (m.n_messages, key)
    strays: dict[str, list[FileColumns]] = {}
    for key in list(groups):
        members = groups[key]
        stray = members[0]
        if len(members) != 1 or stray.n_messages != 1 or not stray.checkpoints or stray.session_id is None:
            continue
        owner = owners.get((os.path.dirname(stray.path), stray.session_id))
        if owner is not None and owner[1] != key and owner[0] > stray.n_messages:
            strays.setdefault(owner[1], []).append(stray)
            del groups[key]
    for found in strays.values():
        found.sort(key=lambda f: f.path)
    return strays


def build_corpus(
    results: list[FileColumns],
    found: Discovery | None = None,
    *,
    price_memo: bool = True,
    rows: Rows | None = None,
    prices: PriceTable | None = None,
    subagents: bool = True,
) -> Corpus:
    """Frames from flattened files. Consumes the rows of ``results`` (their encoded columns are emptied).

    ``rows`` may hold some files' rows decoded already (as worker results arrived); the rest are decoded here.
    ``subagents=False`` leaves out every subagent session: discovery skips the nested files, and the flat
    ones (``kind: "subagent"`` in a file of ``chats/`` itself) are known only once read, so they go here.
    """
    problems = [Problem(r.path, r.error) for r in results if r.error]
    good = [r for r in results if not r.error]
    rows = rows if rows is not None else Rows()
    rows.add(good)
    sessions = _group_sessions(good)
    refs = {s.key: _parent_ref(s.primary) for s in sessions}
    if not subagents:
        sessions = [s for s in sessions if refs[s.key] is None and s.primary.kind != "subagent"]

    parents = link_parents(
        (s.key, s.primary.project_dir, s.primary.session_id, refs[s.key]) for s in sessions
    )
    srow: dict[str, list[Any]] = {k: [] for k in _SESSION_META_SCHEMA}
    msg_runs: list[tuple[str, int, int, int]] = []  # (session key, file rank, start, rows), in frame order
    tool_runs: list[tuple[str, int, int, int]] = []
    primary_rank: dict[str, int] = {}
    for s in sessions:
        p = s.primary
        parent_key = parents.get(s.key)
        parent_ref = refs[s.key]
        kind = "subagent" if parent_ref is not None or p.kind == "subagent" else p.kind
        srow["session_key"].append(s.key)
        srow["group_key"].append(p.group_key)
        srow["parent_ref"].append(parent_ref)
        srow["session"].append(os.path.basename(p.path).rsplit(".", 1)[0])
        srow["session_id"].append(p.session_id)
        srow["project"].append(p.project)
        srow["project_dir"].append(p.project_dir)
        srow["project_hash"].append(p.project_hash)
        srow["kind"].append(kind)
        srow["parent_session_key"].append(parent_key)
        srow["root_session_key"].append(parent_key or s.key)
        srow["file"].append(p.path)
        srow["files"].append(len(s.files))
        srow["era"].append("+".join(f.era for f in s.files))
        srow["summary"].append(p.summary)
        srow["derived_from"].append(p.derived_from)
        srow["start_time"].append(min((f.start_time for f in s.files if f.start_time), default=None))
        srow["last_updated"].append(max((f.last_updated for f in s.files if f.last_updated), default=None))
        srow["broken_lines"].append(sum(f.broken_lines for f in s.files))
        srow["invalid_utf8_lines"].append(sum(f.invalid_utf8_lines for f in s.files))
        srow["first_invalid_utf8_line"].append(
            next((f.first_invalid_utf8_line for f in s.files if f.first_invalid_utf8_line), None)
        )
        srow["first_broken_line"].append(
            next((f.first_broken_line for f in s.files if f.first_broken_line), None)
        )
        srow["rewinds"].append(sum(f.rewinds for f in s.files))
        srow["checkpoints"].append(sum(f.checkpoints for f in s.files))
        srow["live_messages"].append(p.live_messages)
        primary_rank[s.key] = len(s.files) - 1
        for rank, f in enumerate(s.files):  # older files first: their rows come first
            msg_start, tool_start = rows.where[f.path]
            if f.n_messages:
                msg_runs.append((s.key, rank, msg_start, f.n_messages))
            if f.n_tools:
                tool_runs.append((s.key, rank, tool_start, f.n_tools))

    files_meta = pl.DataFrame(srow, schema=_SESSION_META_SCHEMA)
    messages = _in_order(rows.messages, msg_runs, {**_MESSAGE_SCHEMA, "ts": _TS_TYPE})
    tools = _in_order(rows.tools, tool_runs, _TOOL_SCHEMA)
    if any(rank for rank in primary_rank.values()):
        messages, tools = _merge_pairs(messages, tools, primary_rank)
    messages = messages.drop("_rank").with_columns(position=pl.int_range(pl.len()).over("session_key"))
    messages = messages.select("session_key", "position", *MESSAGE_COLUMNS, "ts")
    tools = tools.drop("_rank")
    corpus = _derive(files_meta, messages, tools, price_memo=price_memo, prices=prices)
    corpus.warnings = [*rows.warnings, *corpus.warnings]
    rows.warnings.clear()
    corpus.problems = problems
    corpus.files_read = len(good)
    corpus.files_found = len(results)
    corpus.bytes_read = sum(r.size for r in good)
    corpus.broken_lines = sum(r.broken_lines for r in good)
    if found is not None:
        corpus.skipped = [(str(p), why) for p, why in found.skipped]
        corpus.problems.extend(discovery_problems(found))
    return corpus


class Rows:
    """Files' message and tool-call rows, decoded from the workers' encoded columns into frames.

    Decoding costs the parent more than anything else it does with the rows, so the loader hands each batch
    of worker results to ``add`` as it arrives, while other workers still parse, instead of leaving it all to
    ``build_corpus``. ``where`` gives each file's first message row and first tool-call row in the frames
    (concatenated in order).
    """

    def __init__(self) -> None:
        self.messages: list[pl.DataFrame] = []
        self.tools: list[pl.DataFrame] = []
        self.where: dict[str, tuple[int, int]] = {}
        self.warnings: list[str] = []
        self._next = (0, 0)

    def add(self, files: Iterable[FileColumns]) -> None:
        """Decode the rows of ``files`` not decoded yet, and empty their encoded columns."""
        todo = [f for f in files if not f.error and f.path not in self.where]
        if not todo:
            return
        next_message, next_tool = self._next
        for f in todo:
            self.where[f.path] = (next_message, next_tool)
            next_message += f.n_messages
            next_tool += f.n_tools
        self._next = (next_message, next_tool)
        messages = [c for f in todo for c in f.messages_cols]
        self.messages.extend(_decode(messages, _MESSAGE_SCHEMA, self.warnings, times=("timestamp", "ts")))
        self.tools.extend(_decode([c for f in todo for c in f.tools_cols], _TOOL_SCHEMA, self.warnings))
        for f in todo:
            f.messages_cols = f.tools_cols = []

    def models(self) -> list[str]:
        """The model names in the rows decoded so far (what their requests are priced by)."""
        names: set[str] = set()
        for frame in self.messages:
            names.update(frame.get_column("model").drop_nulls().unique().to_list())
        return sorted(names)


# Decoded into Python lists this many bytes of encoded columns at a time (then turned into a frame).
_DECODE_BATCH_BYTES = 2 * 1024 * 1024


def _decode(
    chunks: list[bytes], schema: dict[str, Any], warnings: list[str], times: tuple[str, str] | None = None
) -> list[pl.DataFrame]:
    """Frames of the rows in ``chunks`` (see ``columns._assemble``), a few megabytes of them at a time so that
    their Python lists stay small; ``times`` = (text column, datetime column to add). Work done here is done
    while workers still parse. A value a column cannot hold is left empty, with a warning."""
    from ctxtool.session.columns import decode_columns

    names = list(schema)
    # No column holds a meaningful empty string (an empty id, model or preview means none).
    no_empty = [pl.when(pl.col(n) != "").then(pl.col(n)).alias(n) for n in names if schema[n] == pl.String]
    frames: list[pl.DataFrame] = []
    at = 0
    while at < len(chunks):
        columns: list[list[Any]] = [[] for _ in names]
        size = 0
        while at < len(chunks) and size < _DECODE_BATCH_BYTES:
            size += len(chunks[at])
            for column, values in zip(columns, decode_columns(chunks[at]), strict=True):
                column.extend(values)
            at += 1
        series = [_series(n, c, schema[n], warnings) for n, c in zip(names, columns, strict=True)]
        del columns
        frame = pl.DataFrame(series).with_columns(no_empty)
        if times is not None:
            frame = frame.with_columns(parse_times(frame.get_column(times[0])).alias(times[1]))
        frames.append(frame)
    return frames


def _series(name: str, values: list[Any], dtype: Any, warnings: list[str]) -> pl.Series:
    try:
        return pl.Series(name, values, dtype=dtype)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        # A count beyond 64 bits, say, from a damaged file: empty, and said, never a silently smaller sum.
        series = pl.Series(name, values, dtype=dtype, strict=False)
        lost = series.null_count() - sum(v is None for v in values)
        warnings.append(
            f"{plural(lost, 'value')} of column {name!r} {'does' if lost == 1 else 'do'} not fit its type "
            f"({dtype}): {'it is' if lost == 1 else 'they are'} left empty, so what "
            f"{'it counts' if lost == 1 else 'they count'} is missing from the totals (check the session "
            "files for damaged numbers)"
        )
        return series


def _in_order(
    frames: list[pl.DataFrame], runs: list[tuple[str, int, int, int]], schema: dict[str, Any]
) -> pl.DataFrame:
    """One frame of the rows ``runs`` name (session key, file rank, first row, rows), in that order, with
    the session key and file rank of every row. ``schema`` names every column of ``frames``. Empties
    ``frames``: the decoded chunks are freed as soon as the rows are reordered."""
    full = {"session_key": pl.String, "_rank": pl.Int64, **schema}
    chunks = frames[:]
    frames.clear()
    if not runs:
        return pl.DataFrame(schema=full)
    df = pl.concat(chunks, rechunk=False) if len(chunks) != 1 else chunks[0]
    del chunks
    starts = [start for _, _, start, _ in runs]
    counts = [n for _, _, _, n in runs]
    expected = 0
    in_place = True
    for start, n in zip(starts, counts, strict=True):
        if start != expected:
            in_place = False
            break
        expected += n
    if not (in_place and expected == df.height):
        order = pl.DataFrame({"start": starts, "n": counts}, schema={"start": pl.Int64, "n": pl.Int64})
        df = df[order.select(pl.int_ranges("start", pl.col("start") + pl.col("n")).explode()).to_series()]
    keys = pl.DataFrame(
        {"session_key": [k for k, _, _, _ in runs], "_rank": [r for _, r, _, _ in runs], "n": counts},
        schema={"session_key": pl.String, "_rank": pl.Int64, "n": pl.Int64},
    ).select(pl.col("session_key").repeat_by("n").explode(), pl.col("_rank").repeat_by("n").explode())
    return pl.concat([keys, df], how="horizontal").select(list(full))


def _merge_pairs(
    messages: pl.DataFrame, tools: pl.DataFrame, primary_rank: dict[str, int]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A legacy .json and the .jsonl written when it was resumed: the .jsonl's rows, preceded by any
    older rows only the .json has (billed, not live). Each message is counted once; row order is kept."""

    def keyed(df: pl.DataFrame) -> pl.DataFrame:
        rank_of = pl.col("session_key").replace_strict(primary_rank, return_dtype=pl.Int64)
        return df.with_columns(
            _is_primary=pl.col("_rank") == rank_of,
            _key=pl.concat_str("session_key", "message_id", separator="\x00"),
            _key_rank=pl.concat_str(
                "session_key", pl.col("_rank").cast(pl.String), "message_id", separator="\x00"
            ),
        )

    m = keyed(messages)
    primary_keys = m.filter(pl.col("_is_primary")).get_column("_key").drop_nulls()
    keep = (
        pl.col("_is_primary")
        | pl.col("_key").is_null()
        | (pl.col("_key").is_in(primary_keys.implode()).not_() & pl.col("_key").is_first_distinct())
    )
    m = m.filter(keep).with_columns(live=pl.col("live") & pl.col("_is_primary"))
    kept_older = m.filter(pl.col("_is_primary").not_()).get_column("_key_rank").drop_nulls()
    t = keyed(tools).filter(pl.col("_is_primary") | pl.col("_key_rank").is_in(kept_older.implode()))
    helpers = ["_is_primary", "_key", "_key_rank"]
    return m.drop(helpers), t.drop(helpers)


def discovery_problems(found: Discovery) -> list[Problem]:
    """What the PATH arguments themselves got wrong (nothing matched, a folder with no sessions)."""
    from ctxtool.session.discover import default_root

    root = str(default_root())
    return [
        *(
            Problem(
                m,
                "is where Gemini CLI keeps its sessions, and it does not exist. Pass session files or "
                "folders, or set GEMINI_CLI_HOME to the folder that holds .gemini/",
                "missing",
            )
            if m == root
            else Problem(
                m,
                "matches no file. Check the path, or quote a glob so the shell does not expand it",
                "missing",
            )
            for m in found.missing
        ),
        *(Problem(str(d), no_sessions_message(str(d), root), "no_sessions") for d in found.empty_dirs),
        *(Problem(str(path), message) for path, _, message in found.unreadable),
    ]


def no_sessions_message(folder: str, root: str) -> str:
    """Why ``folder`` gave no session, and where to point instead (``root``: Gemini CLI's data root)."""
    kinds = "(session-*.json or session-*.jsonl)"
    if folder == root:
        return f"holds no Gemini CLI session files {kinds} yet: run Gemini CLI first, or pass session files"
    return (
        f"holds no Gemini CLI session files {kinds}: point at {root} or a project's chats/ folder, "
        "or pass session files"
    )


def problem_counts(problems: Iterable[Problem]) -> dict[ProblemKind, int]:
    """How many problems of each kind."""
    counts: dict[ProblemKind, int] = dict.fromkeys(PROBLEM_KINDS, 0)
    for p in problems:
        counts[p.kind] += 1
    return counts


def describe_problems(n: Mapping[ProblemKind, int]) -> str:
    """Problems counted by kind (``problem_counts``) in words, for a caption or an error: ``1 folder
    without session files, 2 files could not be read`` ("" when there are none)."""
    parts = [
        *([f"{plural(n['missing'], 'PATH')} matching no file"] if n["missing"] else []),
        *([f"{plural(n['no_sessions'], 'folder')} without session files"] if n["no_sessions"] else []),
        *([f"{plural(n['unreadable'], 'file')} could not be read"] if n["unreadable"] else []),
    ]
    return ", ".join(parts)


_TS_TYPE = pl.Datetime("us", "UTC")
# Gemini CLI writes every time with JavaScript's Date.toISOString() (2026-05-25T09:30:00.123Z); a fork or a
# hand edit may write an offset or no zone (taken as UTC). Each value is read by the first format that fits,
# so a time parses the same whatever else is in its column (polars' inference guesses from the first value).
_TIME_FORMATS = (
    "%Y-%m-%dT%H:%M:%S%.fZ",
    "%Y-%m-%dT%H:%M:%S%.f%z",
    "%Y-%m-%dT%H:%M:%S%.f",
    "%Y-%m-%d %H:%M:%S%.f",
)


def parse_times(text: pl.Series) -> pl.Series:
    """UTC datetimes of ISO-8601 times (null where none of ``_TIME_FORMATS`` fits)."""
    out = text.str.to_datetime(format=_TIME_FORMATS[0], strict=False, time_zone="UTC").cast(_TS_TYPE)
    for fmt in _TIME_FORMATS[1:]:
        if not (out.is_null() & text.is_not_null()).any():
            break
        other = text.str.to_datetime(format=fmt, strict=False, time_zone="UTC").cast(_TS_TYPE)
        out = pl.select(pl.coalesce(out, other)).to_series()
    return out.alias(text.name)


def _derive(
    meta: pl.DataFrame,
    messages: pl.DataFrame,
    tools: pl.DataFrame,
    *,
    price_memo: bool = True,
    prices: PriceTable | None = None,
) -> Corpus:
    from ctxtool.pricing import add_costs

    ids = meta.select("session_key", "session", "session_id", "project", "kind", "root_session_key")
    ts = messages.get_column("ts")  # parsed as the rows were decoded; it goes after `turn`, as it always has
    messages = messages.drop("ts").with_columns(
        turn=pl.col("is_prompt").cast(pl.Int64).cum_sum().over("session_key"),
        ts=ts,
        compression=(pl.col("compression_info") | pl.col("is_snapshot")),
    )
    messages = messages.with_columns(
        _compressions_seen=pl.col("compression").cast(pl.Int64).cum_sum().over("session_key")
    )

    # Identity columns are joined onto the smaller frames only; messages keep just the session key.
    requests = messages.filter((pl.col("type") == "gemini") & pl.col("input").is_not_null()).join(
        ids, on="session_key", how="left"
    )
    # A request recorded without a model name (Gemini CLI 0.61.0 writes an empty answer as a `gemini` message
    # with tokens and no `model`: chatRecordingService.ts `recordMessageTokens` creates it before any model
    # is named) was answered by the session's model: take the request before it, else the one after.
    requests = requests.with_columns(
        model=pl.col("model").forward_fill().backward_fill().over("session_key"),
        model_inferred=pl.col("model").is_null()
        & pl.col("model").forward_fill().backward_fill().over("session_key").is_not_null(),
    )
    requests = requests.with_columns(context_limit=context_limit_expr(pl.col("model")))
    requests = requests.with_columns(
        context=pl.col("input"),
        context_share=pl.col("input") / pl.col("context_limit"),
        cache_ratio=pl.when(pl.col("input") > 0).then(pl.col("cached") / pl.col("input")).otherwise(None),
    )
    requests, warnings = add_costs(requests, prices, memo=price_memo)
    requests = _composition(_events(requests))
    requests = requests.select(
        "session_key",
        "session",
        "session_id",
        "project",
        "kind",
        "root_session_key",
        "message_id",
        "position",
        "turn",
        "timestamp",
        "ts",
        "live",
        "model",
        "model_inferred",
        *TOKEN_COLUMNS,
        "context",
        "context_limit",
        "context_share",
        "cache_ratio",
        "cost",
        "tool_calls",
        "tool_errors",
        *COMPOSITION_COLUMNS,
        "event",
    )

    sessions = _sessions(meta, messages, requests, prices)
    return assemble(sessions, messages, requests, tools, warnings=warnings)


def assemble(
    sessions: pl.DataFrame,
    messages: pl.DataFrame,
    requests: pl.DataFrame,
    calls: pl.DataFrame,
    *,
    warnings: list[str] | None = None,
) -> Corpus:
    """A corpus of these frames, its tool calls (``calls`` with their turn and session) and turns built when
    first read (see ``_Later``). A build, a splice and a stored corpus all take this one way, so the derived
    frames are the same whichever made them."""
    ids = sessions.select("session_key", "session", "session_id", "project", "kind", "root_session_key")

    def tool_calls() -> pl.DataFrame:
        return calls.join(
            messages.select("session_key", "message_id", "turn", "live"),
            on=["session_key", "message_id"],
            how="left",
            maintain_order="left",
        ).join(ids, on="session_key", how="left", maintain_order="left")

    return Corpus(
        sessions,
        messages,
        requests,
        tool_calls,
        lambda: _turns(messages, requests, sessions),
        calls=calls,
        warnings=warnings if warnings is not None else [],
    )


# What fills the context of a request: an estimate, see _composition. They add up to `context`.
COMPOSITION_COLUMNS = ("ctx_overhead", "ctx_prompts", "ctx_model", "ctx_tool_io")
_HIST_COLUMNS = ("hist_prompts", "hist_model", "hist_tool_io")


def _composition(requests: pl.DataFrame) -> pl.DataFrame:
    """Split each request's recorded prompt (``context``) into overhead, prompts, model turns and tool I/O.

    The history sent with a request is estimated part by part with Gemini CLI's estimator when the request
    was recorded (``hist_*``: the live messages before it; see ``ctxtool.session.columns``). What every
    request of a session sends besides its history (system prompt, tool declarations, environment, memory)
    is taken as the smallest part of any of its requests that its history estimate does not explain (the
    *overhead*; 0 when the estimate explains every request whole). The rest of each request's recorded
    prompt is shared among the three history parts in proportion to their estimates, so the four add up to
    ``context`` exactly (the parts are rounded down, the overhead takes the remainder).
    """
    history = pl.sum_horizontal(*_HIST_COLUMNS)
    gap = pl.col("input") - history
    floor = gap.filter((pl.col("input") > 0) & (gap >= 0)).min().over("session_key").fill_null(0).clip(0)
    base = pl.min_horizontal(floor, pl.col("input"))
    rest = pl.col("input") - base
    scale = pl.when(history > 0).then(rest / history).otherwise(0.0)
    parts = {
        "ctx_prompts": (pl.col("hist_prompts") * scale).floor().cast(pl.Int64),
        "ctx_model": (pl.col("hist_model") * scale).floor().cast(pl.Int64),
        "ctx_tool_io": (pl.col("hist_tool_io") * scale).floor().cast(pl.Int64),
    }
    return requests.with_columns(**parts).with_columns(
        ctx_overhead=pl.col("input") - pl.sum_horizontal(*parts)
    )


def _events(requests: pl.DataFrame) -> pl.DataFrame:
    """``event``: what happened to the session's history since its previous request (comma-separated):
    ``compression`` (an info marker or a ``<state_snapshot>``), ``rewind`` (a ``$rewindTo`` record),
    ``rollback`` (a ``$set.messages`` checkpoint that is not a compression: Gemini CLI rewrote the history),
    ``model`` (another model than the previous request's)."""
    prev = {c: pl.col(c).shift(1).over("session_key") for c in ("_compressions_seen", "rewinds_seen")}
    first = pl.int_range(pl.len()).over("session_key") == 0
    compressed = pl.col("_compressions_seen") > prev["_compressions_seen"].fill_null(0)
    rewound = pl.col("rewinds_seen") > prev["rewinds_seen"].fill_null(0)
    history = pl.sum_horizontal(*_HIST_COLUMNS)
    rebuilt = (
        (pl.col("checkpoints_seen") > pl.col("checkpoints_seen").shift(1).over("session_key").fill_null(0))
        & (history < history.shift(1).over("session_key"))  # a resume rewrites the history whole
        & compressed.not_()
    )
    switched = first.not_() & (pl.col("model") != pl.col("model").shift(1).over("session_key"))
    names = [
        pl.when(compressed).then(pl.lit("compression")),
        pl.when(rewound).then(pl.lit("rewind")),
        pl.when(rebuilt).then(pl.lit("rollback")),
        pl.when(switched.fill_null(False)).then(pl.lit("model")),
    ]
    event = pl.concat_str(names, separator=",", ignore_nulls=True)
    return requests.with_columns(event=pl.when(event != "").then(event))


def context_limit_expr(model: pl.Expr) -> pl.Expr:
    """``token_limit(model)`` as a vectorised expression over a model column."""
    expr = pl.lit(DEFAULT_TOKEN_LIMIT, dtype=pl.Int64)
    for name, limit in MODEL_LIMITS.items():
        expr = pl.when(model == name).then(pl.lit(limit, dtype=pl.Int64)).otherwise(expr)
    return expr


def _cost_aggs() -> list[pl.Expr]:
    """A group's cost: what the requests of known price cost (``cost``), how many have no known price
    (``unpriced``: a model genai-prices does not know) and the helper ``_priced``; see ``_known_cost``."""
    return [
        pl.col("cost").sum().alias("cost"),
        pl.col("cost").is_null().sum().cast(pl.Int64).alias("unpriced"),
        pl.col("cost").is_not_null().sum().cast(pl.Int64).alias("_priced"),
    ]


def _known_cost() -> list[pl.Expr]:
    """After ``_cost_aggs`` and a left join: the known part of the cost, summed (0 for no requests), null only
    when requests were made and none has a known price; ``unpriced`` marks a partial sum."""
    return [
        pl.when((pl.col("_priced").fill_null(0) == 0) & (pl.col("unpriced").fill_null(0) > 0))
        .then(None)
        .otherwise(pl.col("cost").fill_null(0.0))
        .alias("cost"),
        pl.col("unpriced").fill_null(0),
    ]


def _turns(messages: pl.DataFrame, requests: pl.DataFrame, meta: pl.DataFrame) -> pl.DataFrame:
    per_msg = messages.group_by("session_key", "turn", maintain_order=True).agg(
        # The typed prompt; in the live view, where a compression may have left only Gemini CLI's copy of
        # it (a message that is not a prompt but keeps its preview), that copy's text.
        pl.coalesce(
            pl.col("preview").filter(pl.col("is_prompt")).first(), pl.col("preview").drop_nulls().first()
        ).alias("prompt"),
        pl.col("ts").min().alias("start"),
        pl.col("ts").max().alias("end"),
        pl.col("live").filter(pl.col("is_prompt") | pl.col("preview").is_not_null()).max().alias("live"),
        pl.len().alias("messages"),
        pl.col("tool_calls").sum(),
        pl.col("tool_errors").sum(),
        pl.col("compression").any().alias("compressed"),
    )
    per_req = requests.group_by("session_key", "turn").agg(
        pl.len().alias("requests"),
        *[pl.col(k).sum() for k in TOKEN_COLUMNS],
        pl.col("input").max().alias("peak_context"),
        pl.col("context_limit").max(),
        *_cost_aggs(),
        pl.col("model").drop_nulls().unique().sort().str.join(",").alias("models"),
        *[pl.col(c).sum() for c in COMPOSITION_COLUMNS],
    )
    turns = per_msg.join(per_req, on=["session_key", "turn"], how="left", maintain_order="left").with_columns(
        pl.col("requests").fill_null(0),
        *[pl.col(k).fill_null(0) for k in (*TOKEN_COLUMNS, *COMPOSITION_COLUMNS)],
        pl.col("live").fill_null(True),
        duration_s=(pl.col("end") - pl.col("start")).dt.total_milliseconds() / 1000.0,
    )
    turns = turns.with_columns(
        # A turn without requests cost nothing; one with requests of unknown price costs what is known.
        *_known_cost(),
        context_share=pl.col("peak_context") / pl.col("context_limit"),
        cache_ratio=pl.when(pl.col("input") > 0).then(pl.col("cached") / pl.col("input")),
    ).drop("_priced")
    # Messages before the first prompt (a <session_context> block, a resumed history) form turn 0; keep it
    # only when it holds something.
    turns = turns.join(
        meta.select("session_key", "session", "project"), on="session_key", how="left", maintain_order="left"
    )
    return turns.filter((pl.col("turn") > 0) | (pl.col("requests") > 0) | pl.col("compressed"))


def _turn_count() -> pl.Expr:
    """A session's turns, over its message rows: the rows ``_turns`` keeps for it, without building them.

    Each prompt starts a turn; turn 0 (messages before the first prompt) is one when it holds a request or a
    compression, as a request first seen in a ``$set.messages`` checkpoint of a file that has no prompt
    before it does. So every request is in a turn that is counted, and ``stats --by session`` counts the
    rows ``--by turn`` lists."""
    request = (pl.col("type") == "gemini") & pl.col("input").is_not_null()
    return pl.col("turn").filter((pl.col("turn") > 0) | request | pl.col("compression")).n_unique()


def _with_turn_counts(sessions: pl.DataFrame, turns: pl.DataFrame) -> pl.DataFrame:
    """``sessions`` with ``turns`` counted from the rows of a turns frame (a filtered or live view's)."""
    counts = turns.group_by("session_key").agg(pl.len().cast(sessions.schema["turns"]).alias("_turns"))
    return (
        sessions.join(counts, on="session_key", how="left", maintain_order="left")
        .with_columns(turns=pl.col("_turns").fill_null(0))
        .drop("_turns")
    )


# Gemini CLI 0.61.0 makes two model calls per compression it runs (ChatCompressionService `compress`: the
# summary, then the verification probe, both role `utility_compressor`) and records neither in the session.
HIDDEN_CALLS_PER_COMPRESSION = 2


def _hidden_compression_calls(messages: pl.DataFrame, prices: PriceTable | None = None) -> pl.DataFrame:
    """Per session, an estimate of the compression calls the file shows happened but does not record.

    For each ``<state_snapshot>`` message: both calls read the history as it stood (the prompt of the last
    request recorded before it, an upper bound: Gemini CLI keeps its last 30 % out of the summary), the probe
    also the summary; each writes about the summary (4 characters a token). Priced at the rates of the model
    of that last request. An estimate, labelled so, never added to billed figures.
    """
    from ctxtool.pricing import add_costs

    marked = messages.select(
        "session_key",
        "is_snapshot",
        "text_chars",
        last_input=pl.col("input").forward_fill().over("session_key").fill_null(0),
        model=pl.when(pl.col("input").is_not_null()).then(pl.col("model")).forward_fill().over("session_key"),
    ).filter(pl.col("is_snapshot"))
    summary = pl.col("text_chars") // 4
    calls = marked.with_columns(
        input=HIDDEN_CALLS_PER_COMPRESSION * pl.col("last_input") + summary,
        output=HIDDEN_CALLS_PER_COMPRESSION * summary,
        cached=pl.lit(0, dtype=pl.Int64),
        thoughts=pl.lit(0, dtype=pl.Int64),
        tool=pl.lit(0, dtype=pl.Int64),
    )
    calls, _ = add_costs(calls, prices)
    return calls.group_by("session_key").agg(
        (pl.len() * HIDDEN_CALLS_PER_COMPRESSION).alias("hidden_requests"),
        pl.col("input").sum().alias("hidden_input"),
        pl.col("output").sum().alias("hidden_output"),
        pl.col("cost").sum().alias("hidden_cost"),
    )


def _sessions(
    meta: pl.DataFrame, messages: pl.DataFrame, requests: pl.DataFrame, prices: PriceTable | None = None
) -> pl.DataFrame:
    hidden = _hidden_compression_calls(messages, prices)
    msg = messages.group_by("session_key").agg(
        pl.len().alias("billed_messages"),
        _turn_count().alias("turns"),
        pl.col("tool_calls").sum(),
        pl.col("tool_errors").sum(),
        pl.col("compression_info").sum().alias("compression_infos"),
        pl.col("is_snapshot").sum().alias("snapshots"),
        pl.col("ts").min().alias("first_ts"),
        pl.col("ts").max().alias("last_ts"),
    )
    req = requests.group_by("session_key").agg(
        pl.len().alias("requests"),
        *[pl.col(k).sum() for k in TOKEN_COLUMNS],
        *_cost_aggs(),
        pl.col("input").filter(pl.col("live")).last().alias("context"),
        pl.col("input").filter(pl.col("live")).max().alias("peak_context"),
        pl.col("context_limit").max(),
        pl.col("model").drop_nulls().unique().sort().str.join(",").alias("models"),
        pl.col("live").sum().alias("live_requests"),
        *[pl.col(c).sum() for c in COMPOSITION_COLUMNS],
    )
    meta = meta.with_columns(
        start_ts=parse_times(meta.get_column("start_time")),
        updated_ts=parse_times(meta.get_column("last_updated")),
    )
    out = (
        meta.join(msg, on="session_key", how="left", maintain_order="left")
        .join(req, on="session_key", how="left", maintain_order="left")
        .join(hidden, on="session_key", how="left", maintain_order="left")
        .with_columns(
            *[pl.col(k).fill_null(0) for k in ("hidden_requests", "hidden_input", "hidden_output")],
            pl.col("hidden_cost").fill_null(0.0),
            pl.col("requests").fill_null(0),
            pl.col("live_requests").fill_null(0),
            *[pl.col(k).fill_null(0) for k in (*TOKEN_COLUMNS, *COMPOSITION_COLUMNS)],
            *[
                pl.col(k).fill_null(0)
                for k in (
                    "billed_messages",
                    "turns",
                    "tool_calls",
                    "tool_errors",
                    "compression_infos",
                    "snapshots",
                )
            ],
            pl.col("context_limit").fill_null(DEFAULT_TOKEN_LIMIT),
            # Each resume writes a metadata line with a new startTime (Gemini CLI 0.61.0,
            # chatRecordingService.ts `initialize`); the session started at the earliest of them all.
            start=pl.min_horizontal(pl.col("start_ts"), pl.col("first_ts")),
            end=pl.coalesce(pl.col("last_ts"), pl.col("updated_ts")),
        )
        .with_columns(
            *_known_cost(),
            # One compression leaves an info marker (interactive UI) and, since v0.44, a snapshot message;
            # count events, not traces. `$set.messages` checkpoints also come from other history edits,
            # so they have their own column.
            compressions=pl.max_horizontal("compression_infos", "snapshots"),
            context_share=pl.col("peak_context") / pl.col("context_limit"),
            cache_ratio=pl.when(pl.col("input") > 0).then(pl.col("cached") / pl.col("input")),
        )
        .drop("_priced", "first_ts", "last_ts", "start_time", "last_updated", "start_ts", "updated_ts")
    )
    children = (
        out.filter(pl.col("parent_session_key").is_not_null())
        .group_by("parent_session_key")
        .agg(pl.len().alias("subagents"))
    )
    return out.join(
        children, left_on="session_key", right_on="parent_session_key", how="left", maintain_order="left"
    ).with_columns(pl.col("subagents").fill_null(0))


def _session_match(sessions: pl.DataFrame, wanted: str) -> pl.Expr:
    """Sessions that ``--session WANTED`` names: a session id or a unique prefix of one (the short id a table
    shows is such a prefix), or a file name without its extension, or the file itself. Never a substring
    found elsewhere in a name. A prefix shared by several sessions is a usage error listing them; a whole
    id that several files share (the a2a server writes a constant one) names them all."""
    from ctxtool.errors import UsageError

    exact = (
        (pl.col("session_id") == wanted) | (pl.col("session") == wanted) | (pl.col("session_key") == wanted)
    )
    if sessions.filter(exact).height:
        return exact
    prefix = pl.col("session_id").str.starts_with(wanted)
    roots = sessions.filter(prefix & pl.col("parent_session_key").is_null())
    if roots.height > 1:
        names = ", ".join(f"{r['session_id']} ({r['session']})" for r in roots.head(10).iter_rows(named=True))
        raise UsageError(
            f"--session {wanted} is ambiguous: {roots.height} sessions have an id starting with it: {names}",
            "Give more characters of the id",
        )
    return prefix


# --- reports ---------------------------------------------------------------------------------------


def filter_corpus(
    corpus: Corpus,
    *,
    since: date | None = None,
    until: date | None = None,
    projects: Sequence[str] = (),
    sessions: Sequence[str] = (),
    models: Sequence[str] = (),
) -> Corpus:
    """Keep requests (and the turns/sessions they belong to) matching every filter given. ``models``: a
    request's model equals one of them or starts with it (``gemini-2.5`` names every 2.5 model); turns are
    then summed over the matching requests only."""
    if not (since or until or projects or sessions or models):
        return corpus
    keep = corpus.sessions
    if projects:
        keep = keep.filter(
            pl.any_horizontal(
                *[
                    pl.col("project").str.contains(p, literal=True) | (pl.col("project_dir") == p)
                    for p in projects
                ]
            )
        )
    if sessions:
        keep = keep.filter(pl.any_horizontal(*[_session_match(keep, s) for s in sessions]))
    # A subagent follows its parent session when filtering by session.
    roots = keep.get_column("session_key")
    keys = corpus.sessions.filter(
        pl.col("session_key").is_in(roots.implode()) | pl.col("root_session_key").is_in(roots.implode())
    ).get_column("session_key")

    def by_key(df: pl.DataFrame) -> pl.DataFrame:
        return df.filter(pl.col("session_key").is_in(keys.implode()))

    requests = by_key(corpus.requests)
    turns = by_key(corpus.turns)
    messages = by_key(corpus.messages)
    meta = by_key(corpus.sessions)
    if since or until:
        requests = requests.filter(_within_days("ts", since, until))
        messages = messages.filter(_within_days("ts", since, until))
        turns = turns.filter(_within_days("start", since, until))
        meta = meta.filter(pl.col("session_key").is_in(messages.get_column("session_key").unique().implode()))
    if models:
        requests = requests.filter(
            pl.any_horizontal(
                *[(pl.col("model") == m) | pl.col("model").str.starts_with(m) for m in models]
            ).fill_null(False)
        )
        used = requests.get_column("session_key").unique().implode()
        messages = messages.filter(pl.col("session_key").is_in(used))
        meta = meta.filter(pl.col("session_key").is_in(used))
        turns = _turns(messages, requests, meta).filter(pl.col("requests") > 0)
    if since or until or models:  # the turns left: what `--by turn` lists, so what a session counts
        meta = _with_turn_counts(meta, turns)
    return replace(
        corpus,
        sessions=meta,
        messages=messages,
        requests=requests,
        tool_calls=by_key(corpus.tool_calls),
        turns=turns,
        calls=None,
    )


def _within_days(column: str, since: date | None, until: date | None) -> pl.Expr:
    """``column`` (a timestamp) falls on a UTC day in [since, until]; an open end is not checked."""
    day = pl.col(column).dt.date()
    cond = pl.lit(True)
    if since:
        cond = cond & (day >= since)
    if until:
        cond = cond & (day <= until)
    return cond


def _agg_requests(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    return (
        df.group_by(keys)
        .agg(
            pl.col("session_key").n_unique().alias("sessions"),
            pl.len().alias("requests"),
            *[pl.col(k).sum() for k in TOKEN_COLUMNS],
            pl.col("input").max().alias("peak_context"),
            *_cost_aggs(),
            pl.col("tool_calls").sum(),
        )
        .with_columns(
            *_known_cost(),
            cache_ratio=pl.when(pl.col("input") > 0).then(pl.col("cached") / pl.col("input")),
        )
        .drop("_priced")
        .sort(keys)
    )


# Columns each report shows, in order (the README documents every one).
# The columns of every report that sums requests by one key (model, project, day, week, month).
_AGGREGATE_COLUMNS = [
    "sessions",
    "requests",
    *TOKEN_COLUMNS,
    "peak_context",
    "cache_ratio",
    "cost",
    "unpriced",
]

REPORT_COLUMNS: dict[str, list[str]] = {
    "turn": [
        "session",
        "turn",
        "prompt",
        "start",
        "duration_s",
        "requests",
        *TOKEN_COLUMNS,
        "peak_context",
        "context_limit",
        "context_share",
        "cache_ratio",
        "tool_calls",
        "tool_errors",
        "compressed",
        "live",
        "models",
        "cost",
        "unpriced",
        *COMPOSITION_COLUMNS,
    ],
    "request": [
        "session",
        "turn",
        "message_id",
        "timestamp",
        "model",
        "model_inferred",
        *TOKEN_COLUMNS,
        "context",
        "context_limit",
        "context_share",
        "cache_ratio",
        "tool_calls",
        "live",
        "cost",
        *COMPOSITION_COLUMNS,
        "event",
    ],
    "session": [
        "session",
        "session_id",
        "derived_from",
        "project",
        "kind",
        "subagents",
        "start",
        "end",
        "turns",
        "requests",
        *TOKEN_COLUMNS,
        "context",
        "peak_context",
        "context_limit",
        "context_share",
        "cache_ratio",
        "compressions",
        "rewinds",
        "tool_calls",
        "tool_errors",
        "models",
        "cost",
        "unpriced",
        "hidden_requests",
        "hidden_input",
        "hidden_output",
        "hidden_cost",
        "file",
        *COMPOSITION_COLUMNS,
    ],
    "model": ["model", *_AGGREGATE_COLUMNS],
    "project": ["project", *_AGGREGATE_COLUMNS],
    "day": ["day", *_AGGREGATE_COLUMNS],
    "week": ["week", *_AGGREGATE_COLUMNS],
    "month": ["month", *_AGGREGATE_COLUMNS],
}


def report(
    corpus: Corpus, by: str, *, include_subagents_in_parent: bool = True, timezone: str | None = None
) -> pl.DataFrame:
    """The rows of ``ctxtool stats --by BY``. ``timezone`` (an IANA name; default UTC) decides which day,
    week (the date of its Monday, as ccusage shows it) or month (``YYYY-MM``) a request falls in."""
    if by not in BY_CHOICES:
        raise ValueError(f"by must be one of {', '.join(BY_CHOICES)}")
    if by == "turn":
        df = corpus.turns.sort("session", "session_key", "turn")
    elif by == "request":
        df = corpus.requests.sort("session", "session_key", "position")
    elif by == "session":
        df = _session_report(corpus, include_subagents_in_parent)
    elif by == "model":
        df = _agg_requests(corpus.requests.with_columns(pl.col("model").fill_null("(unknown)")), ["model"])
    elif by == "project":
        df = _agg_requests(corpus.requests, ["project"])
    else:
        local = pl.col("ts").dt.convert_time_zone(timezone) if timezone else pl.col("ts")
        key = {
            "day": local.dt.date(),
            "week": local.dt.truncate("1w").dt.date(),  # polars weeks start on Monday
            "month": local.dt.strftime("%Y-%m"),
        }[by]
        df = _agg_requests(corpus.requests.with_columns(key.alias(by)), [by])
    return df.select(REPORT_COLUMNS[by])


def with_uncached_input(df: pl.DataFrame) -> pl.DataFrame:
    """The token columns as ccusage shows them: ``input`` without the cached tokens, so that ``input``,
    ``cached``, ``output``, ``thoughts`` and ``tool`` add up to ``total``; Gemini's own prompt count (cached
    included, what the context holds) stays as ``prompt_tokens``. What ``ctxtool stats`` prints and writes;
    the frames themselves keep Gemini CLI's names and meanings. ``ctxtool.tokens.report_tokens`` is the same
    rule on one recorded response (``diff``)."""
    if "input" not in df.columns or "cached" not in df.columns:
        return df
    at = df.columns.index("cached") + 1
    df = df.with_columns(
        pl.col("input").alias("prompt_tokens"),
        (pl.col("input") - pl.col("cached").fill_null(0)).alias("input"),
    )
    order = [c for c in df.columns if c != "prompt_tokens"]
    return df.select([*order[:at], "prompt_tokens", *order[at:]])


# What a subagent session adds to its parent's row (cost too, see _session_report). Its turns go with its
# requests: every request is in a counted turn, and the rows of `--by session` count the turns `--by turn`
# lists (a subagent's under its own name).
_ROLLED_UP = (*TOKEN_COLUMNS, "requests", "turns", "tool_calls", "tool_errors", "unpriced")


def _session_report(corpus: Corpus, roll_up: bool) -> pl.DataFrame:
    s = corpus.sessions
    if corpus.requests.height != _request_count(s):
        # Filtered by date: recompute token sums from the requests that remain.
        sums = _agg_requests(corpus.requests, ["session_key"]).select(
            "session_key", "requests", *TOKEN_COLUMNS, "cost", "unpriced"
        )
        s = s.drop("requests", *TOKEN_COLUMNS, "cost", "unpriced").join(
            sums, on="session_key", how="left", maintain_order="left"
        )
        s = s.with_columns(
            pl.col("requests").fill_null(0),
            *[pl.col(k).fill_null(0) for k in TOKEN_COLUMNS],
            pl.col("cost").fill_null(0.0),
            pl.col("unpriced").fill_null(0),
        )
    if not roll_up:
        return s.sort("start", "session", "session_key", nulls_last=True)
    # Subagent sessions are attributed to their parent: their tokens and cost are added to the parent's row.
    child = s.filter(pl.col("parent_session_key").is_not_null())
    if child.height == 0:
        return s.sort("start", "session", "session_key", nulls_last=True)
    add = child.group_by("parent_session_key").agg(
        *[pl.col(k).sum().alias(f"_sub_{k}") for k in _ROLLED_UP],
        pl.col("cost").sum().alias("_sub_cost"),
        pl.col("cost").is_not_null().any().alias("_sub_priced"),
    )
    parents = (
        s.filter(pl.col("parent_session_key").is_null())
        .join(add, left_on="session_key", right_on="parent_session_key", how="left", maintain_order="left")
        .with_columns(
            *[(pl.col(k) + pl.col(f"_sub_{k}").fill_null(0)).alias(k) for k in _ROLLED_UP],
            # The known parts add up; null only when neither side has a known price.
            cost=pl.when(pl.col("cost").is_null() & pl.col("_sub_priced").fill_null(False).not_())
            .then(pl.col("cost"))
            .otherwise(pl.col("cost").fill_null(0.0) + pl.col("_sub_cost").fill_null(0.0)),
        )
        .with_columns(cache_ratio=pl.when(pl.col("input") > 0).then(pl.col("cached") / pl.col("input")))
        .drop([c for c in add.columns if c != "parent_session_key"])
    )
    return parents.sort("start", "session", "session_key", nulls_last=True)


def _request_count(sessions: pl.DataFrame) -> int:
    return int(sessions.get_column("requests").sum() or 0) if sessions.height else 0


def totals(df: pl.DataFrame) -> dict[str, Any]:
    """A totals row for a report: sums of the additive columns, max of the peaks."""
    out: dict[str, Any] = {}
    for col in df.columns:
        if col in (
            *TOKEN_COLUMNS,
            "prompt_tokens",
            "requests",
            "sessions",
            "tool_calls",
            "tool_errors",
            "turns",
            "compressions",
            "unpriced",
            *COMPOSITION_COLUMNS,
        ):
            out[col] = int(df.get_column(col).sum() or 0)
        elif col in ("peak_context", "context", "context_share"):
            out[col] = df.get_column(col).max()
        elif col == "cost":
            # The known part, summed; null only when no row has a known price (``unpriced`` says how many
            # requests are missing from it).
            c = df.get_column(col)
            out[col] = None if c.len() and c.null_count() == c.len() else float(c.sum())
    prompt = out.get("prompt_tokens", out.get("input"))
    if prompt:
        out["cache_ratio"] = out.get("cached", 0) / prompt
    return out


def live_only(corpus: Corpus) -> Corpus:
    """The live view: only requests and turns still in the history Gemini CLI would resume."""
    requests = corpus.requests.filter(pl.col("live"))
    messages = corpus.messages.filter(pl.col("live"))
    turns = _turns(messages, requests, corpus.sessions)
    meta = corpus.sessions.drop(
        "requests", *TOKEN_COLUMNS, "cost", "unpriced", "context", "peak_context", "models", "live_requests"
    )
    sums = requests.group_by("session_key").agg(
        pl.len().alias("requests"),
        *[pl.col(k).sum() for k in TOKEN_COLUMNS],
        *_cost_aggs(),
        pl.col("input").last().alias("context"),
        pl.col("input").max().alias("peak_context"),
        pl.col("model").drop_nulls().unique().sort().str.join(",").alias("models"),
        pl.len().alias("live_requests"),
    )
    sessions = (
        meta.join(sums, on="session_key", how="left", maintain_order="left")
        .with_columns(
            pl.col("requests").fill_null(0),
            pl.col("live_requests").fill_null(0),
            *[pl.col(k).fill_null(0) for k in TOKEN_COLUMNS],
            *_known_cost(),
        )
        .drop("_priced")
    )
    sessions = _with_turn_counts(sessions, turns)  # the turns still live, as `--by turn --live` lists them
    return replace(
        corpus,
        sessions=sessions,
        messages=messages,
        requests=requests,
        tool_calls=corpus.tool_calls.filter(pl.col("live").fill_null(True)),
        turns=turns,
        calls=None,
    )


def hidden_calls(corpus: Corpus) -> tuple[int, float]:
    """Gemini CLI's unrecorded compression calls over the corpus's sessions: (requests, estimated cost)."""
    s = corpus.sessions
    if s.height == 0 or "hidden_requests" not in s.columns:
        return 0, 0.0
    return int(s.get_column("hidden_requests").sum() or 0), float(s.get_column("hidden_cost").sum() or 0.0)


def read_warnings(corpus: Corpus) -> list[str]:
    """What a command reading ``corpus`` should warn about: files that could not be read, files with broken
    lines, and the corpus's own warnings (unknown models, unrepresentable values)."""
    return [
        *(str(p) for p in corpus.problems),
        *(
            f"{path}: skipped {plural(broken, 'broken line')} (first at line {first})"
            for path, broken, first in broken_files(corpus)
        ),
        *(
            f"{r['file']}: {plural(r['invalid_utf8_lines'], 'line')} "
            f"{'holds' if r['invalid_utf8_lines'] == 1 else 'hold'} bytes that are not UTF-8 (first at line "
            f"{r['first_invalid_utf8_line']}); read with U+FFFD in their place, as Gemini CLI reads them"
            for r in corpus.sessions.filter(pl.col("invalid_utf8_lines") > 0).iter_rows(named=True)
        ),
        *([describe_total_mismatches(mismatched)] if (mismatched := total_mismatches(corpus)) else []),
        *corpus.warnings,
    ]


def total_mismatches(corpus: Corpus) -> list[tuple[str, int]]:
    """(file, requests) for every session with requests whose recorded ``total`` is not the sum of its parts
    (``ctxtool.tokens.total_disagrees`` on the requests frame: such a total is kept as recorded)."""
    req = corpus.requests
    if req.height == 0:
        return []
    parts = pl.sum_horizontal(*[pl.col(k).fill_null(0) for k in TOTAL_PARTS])
    counts = (
        req.filter(pl.col("total").fill_null(0) != parts)
        .group_by("session_key")
        .agg(pl.len().alias("n"))
        .join(corpus.sessions.select("session_key", "file"), on="session_key", how="left")
        .sort("file", "session_key", nulls_last=True)
    )
    return [(r["file"] or r["session_key"], int(r["n"])) for r in counts.iter_rows(named=True)]


def broken_files(corpus: Corpus) -> list[tuple[str, int, int]]:
    """(file, broken lines, first broken line) for every session that had unparseable lines."""
    df = corpus.sessions.filter(pl.col("broken_lines") > 0)
    return [(r["file"], r["broken_lines"], r["first_broken_line"] or 0) for r in df.iter_rows(named=True)]


def read_summary(corpus: Corpus) -> dict[str, Any]:
    """What was read, for the JSON envelope and the table caption."""
    reasons: dict[str, int] = {}
    for _, why in corpus.skipped:
        reasons[why] = reasons.get(why, 0) + 1
    s = corpus.sessions
    return {
        "files": corpus.files_read,
        "bytes": corpus.bytes_read,
        "sessions": s.height,
        "subagent_sessions": s.filter(pl.col("kind") == "subagent").height if s.height else 0,
        "requests": corpus.requests.height,
        "total_tokens": int(corpus.requests.get_column("total").sum() or 0),
        "broken_lines": corpus.broken_lines,
        "invalid_utf8_lines": int(s.get_column("invalid_utf8_lines").sum() or 0) if s.height else 0,
        "total_mismatches": sum(n for _, n in total_mismatches(corpus)),
        "skipped": [{"file": f, "reason": why} for f, why in corpus.skipped],
        "skipped_by_reason": reasons,
        "errors": [{"file": p.path, "message": p.message} for p in corpus.problems if p.kind == "unreadable"],
        "empty_folders": [
            {"path": p.path, "message": p.message} for p in corpus.problems if p.kind == "no_sessions"
        ],
        "missing_paths": [
            {"path": p.path, "message": p.message} for p in corpus.problems if p.kind == "missing"
        ],
    }


# The plural of the skip reasons that are nouns (``read.skipped_by_reason`` keys, ctxtool.session.discover);
# the others ("permission denied", "vanished") read the same after any count.
_SKIPPED_PLURAL = {
    "temporary file": "temporary files",
    "unreadable-file backup left by Gemini CLI": "unreadable-file backups left by Gemini CLI",
    "backup made by ctxtool compact --in-place": "backups made by ctxtool compact --in-place",
    "symlink loop": "symlink loops",
    "dangling symlink": "dangling symlinks",
    "not a regular file": "not regular files",
}


def describe_read(summary: dict[str, Any]) -> str:
    size = summary["bytes"]
    amount = f"{size / 1_000_000:,.1f} MB" if size >= 1_000_000 else f"{size / 1_000:,.1f} kB"
    text = (
        f"Read {plural(summary['files'], 'file')} ({amount}): {plural(summary['sessions'], 'session')}"
        f" ({summary['subagent_sessions']:,} subagent), {plural(summary['requests'], 'request')}."
    )
    if summary["skipped_by_reason"]:
        parts = [
            plural(n, why, _SKIPPED_PLURAL[why]) if why in _SKIPPED_PLURAL else f"{n:,} {why}"
            for why, n in sorted(summary["skipped_by_reason"].items())
        ]
        text += f" Skipped {sum(summary['skipped_by_reason'].values())}: " + ", ".join(parts) + "."
    problems = describe_problems(
        {
            "missing": len(summary.get("missing_paths", ())),
            "no_sessions": len(summary.get("empty_folders", ())),
            "unreadable": len(summary["errors"]),
        }
    )
    if problems:
        text += f" {problems[0].upper()}{problems[1:]} (see warnings)."
    if summary["broken_lines"]:
        text += f" {plural(summary['broken_lines'], 'broken line')} skipped."
    if summary.get("invalid_utf8_lines"):
        text += f" {plural(summary['invalid_utf8_lines'], 'line')} with invalid UTF-8 (see warnings)."
    if summary.get("total_mismatches"):
        text += (
            f" {plural(summary['total_mismatches'], 'recorded total')}"
            f" {'disagrees with its' if summary['total_mismatches'] == 1 else 'disagree with their'} parts"
            " (see warnings)."
        )
    index = summary.get("index") or {}
    if index.get("corpus_from_cache"):
        text += " Nothing changed since the last run: served from ctxtool's index."
    elif index.get("files_from_index") or index.get("files_resumed"):
        cached, resumed, parsed = (
            index.get(k, 0) for k in ("files_from_index", "files_resumed", "files_parsed")
        )
        parts = [
            *([f"{plural(cached, 'unchanged file')} from the index"] if cached else []),
            *(
                [f"{plural(resumed, 'grown file')} read from where {'it' if resumed == 1 else 'they'} ended"]
                if resumed
                else []
            ),
            *([f"{parsed:,} read in full"] if parsed else []),
        ]
        text += f" {'; '.join(parts)}."
    return text
