"""The frames of a ``Corpus``, built from the engine's columns: every figure in them is the engine's.

The sessions, requests and turns frames take their rows from the tally and its views, the messages and tool
calls frames the rows the sessions' files hold, so a frame and a report never disagree: polars is the
library's face, not a second engine. A filter or the live view (``narrowed``) is made into frames the same
way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from ctxtool.frames import views
from ctxtool.frames.model import (
    COMPOSITION_COLUMNS,
    MESSAGE_SCHEMA,
    SESSION_META_SCHEMA,
    TOKEN_COLUMNS,
    TOOL_SCHEMA,
    TS_TYPE,
    Corpus,
)
from ctxtool.frames.tally import _ERRORS, _INFO, _LIVE, _MODEL, _SNAP, _TIME, _WRITTEN, Session, Tally
from ctxtool.session.stamp import MESSAGE_COLUMNS, TOOL_COLUMNS

if TYPE_CHECKING:
    from ctxtool.session.columns import FileColumns

_U32 = pl.UInt32
SESSIONS_SCHEMA: dict[str, Any] = {
    # What a session's files say of it (the times they record are in ``start`` and ``end``), then its figures.
    **{k: v for k, v in SESSION_META_SCHEMA.items() if k not in ("start_time", "last_updated")},
    **dict.fromkeys(("billed_messages", "turns"), _U32),
    **dict.fromkeys(("tool_calls", "tool_errors"), pl.Int64),
    **dict.fromkeys(("compression_infos", "snapshots", "requests"), _U32),
    **dict.fromkeys(TOKEN_COLUMNS, pl.Int64),
    "cost": pl.Float64,
    "unpriced": pl.Int64,
    **dict.fromkeys(("context", "peak_context", "context_limit"), pl.Int64),
    "models": pl.String,
    "live_requests": _U32,
    **dict.fromkeys(COMPOSITION_COLUMNS, pl.Int64),
    "hidden_requests": _U32,
    **dict.fromkeys(("hidden_input", "hidden_output"), pl.Int64),
    "hidden_cost": pl.Float64,
    **dict.fromkeys(("start", "end"), TS_TYPE),
    "compressions": _U32,
    **dict.fromkeys(("context_share", "cache_ratio"), pl.Float64),
    "subagents": _U32,
}
_IDS = ("session", "session_id", "project", "kind", "root_session_key")
REQUESTS_SCHEMA: dict[str, Any] = {
    **dict.fromkeys(("session_key", *_IDS, "message_id"), pl.String),
    **dict.fromkeys(("position", "turn"), pl.Int64),
    "timestamp": pl.String,
    "ts": TS_TYPE,
    "live": pl.Boolean,
    "model": pl.String,
    "model_inferred": pl.Boolean,
    **dict.fromkeys(TOKEN_COLUMNS, pl.Int64),
    **dict.fromkeys(("context", "context_limit"), pl.Int64),
    **dict.fromkeys(("context_share", "cache_ratio", "cost"), pl.Float64),
    **dict.fromkeys(("tool_calls", "tool_errors"), pl.Int64),
    **dict.fromkeys(COMPOSITION_COLUMNS, pl.Int64),
    "event": pl.String,
}
TURNS_SCHEMA: dict[str, Any] = {
    "session_key": pl.String,
    "turn": pl.Int64,
    "prompt": pl.String,
    **dict.fromkeys(("start", "end"), TS_TYPE),
    "live": pl.Boolean,
    "messages": _U32,
    **dict.fromkeys(("tool_calls", "tool_errors"), pl.Int64),
    "compressed": pl.Boolean,
    "requests": _U32,
    **dict.fromkeys(TOKEN_COLUMNS, pl.Int64),
    **dict.fromkeys(("peak_context", "context_limit"), pl.Int64),
    "cost": pl.Float64,
    "unpriced": pl.Int64,
    "models": pl.String,
    **dict.fromkeys(COMPOSITION_COLUMNS, pl.Int64),
    **dict.fromkeys(("duration_s", "context_share", "cache_ratio"), pl.Float64),
    **dict.fromkeys(("session", "project"), pl.String),
}
MESSAGES_SCHEMA: dict[str, Any] = {
    "session_key": pl.String,
    "position": pl.Int64,
    **MESSAGE_SCHEMA,
    "turn": pl.Int64,
    "ts": TS_TYPE,
    "compression": pl.Boolean,
    "_compressions_seen": pl.Int64,
}
CALLS_SCHEMA: dict[str, Any] = {"session_key": pl.String, **TOOL_SCHEMA}
# What a session's files say of their lines: summed, and the first line of each kind met (None: none).
_SUMMED = ("broken_lines", "invalid_utf8_lines", "checkpoints")
_FIRSTS = ("first_invalid_utf8_line", "first_broken_line", "first_overlong_line")
_CANONICAL = "%Y-%m-%dT%H:%M:%S%.fZ"  # tally.canonical_times: the one shape of a session's times


def corpus_of(t: Tally, results: Sequence[FileColumns], found: Any = None) -> Corpus:
    """The frames of ``t`` (made with ``detail``) and the account of what was read."""
    corpus = Corpus(
        _rows_frame(map(_session_values, t.sessions), SESSIONS_SCHEMA),
        _messages(t.sessions),
        _requests(t.sessions),
        lambda: _tool_calls(t.sessions, calls, corpus.messages),
        lambda: _turns(t.sessions),
        files_read=t.files_read,
        files_found=len(results),
        bytes_read=t.bytes_read,
        problems=list(t.problems),
        skipped=list(t.skipped),
        warnings=list(t.warnings),
        broken_lines=t.broken_lines,
        calls=(calls := _calls(t.sessions, live=False)),
        tally=t,
    )
    return corpus


def narrowed(corpus: Corpus, filters: Mapping[str, Any], *, live: bool) -> Corpus:
    """What ``filters`` and ``live`` keep of ``corpus``, as frames of the engine's view (``views.view``)."""
    if corpus.view_of is not None:  # a view of a view: of the corpus, with both's filters
        base, before = corpus.view_of
        return narrowed(base, {**before, **{k: v for k, v in filters.items() if v}}, live=live)
    if (t := corpus.tally) is None:
        raise ValueError("a corpus built without the engine's tally cannot be filtered")
    v = views.view(t, filters, live=live)
    whole = corpus.messages  # (a call keeps the turn of its message, whatever the filter keeps of it)
    if corpus.calls is None:  # a dataset's: its tool calls, of the sessions kept
        keys = pl.Series([s.key for s in v.sessions], dtype=pl.String).implode()
        kept = corpus.tool_calls.filter(pl.col("session_key").is_in(keys))
        tool_calls: Any = kept.filter(pl.col("live").fill_null(True)) if live else kept
    else:
        calls = _calls(v.sessions, live=live)
        tool_calls = lambda: _tool_calls(v.sessions, calls, whole)  # noqa: E731
    return dataclasses.replace(
        corpus,
        sessions=_rows_frame(map(_session_values, v.sessions), SESSIONS_SCHEMA),
        messages=_messages(v.sessions),
        requests=_requests(v.sessions),
        tool_calls=tool_calls,
        turns=lambda: _turns(v.sessions),
        calls=None,
        tally=v,
        view_of=(corpus, dict(filters)),
    )


def _frame(columns: dict[str, list[Any]], schema: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame({name: pl.Series(name, columns[name], dtype=dtype) for name, dtype in schema.items()})


def _rows_frame(rows: Iterable[Mapping[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
    out: dict[str, list[Any]] = {name: [] for name in schema}
    for row in rows:
        for name in schema:
            out[name].append(row[name])
    return _frame(out, schema)


def _session_values(s: Session) -> dict[str, Any]:
    if s.files is None:  # read from a dataset: its row there, with the figures of this view
        return {**s.meta, **s.row}
    files, d = s.files, views.detail(s)
    p, c = files[-1], d.columns
    live = [c[_LIVE][d.at[j]] for j in (s.kept if s.kept is not None else range(len(d.at)))]
    return {
        **s.row,
        "session_key": s.key,
        "group_key": p.group_key,
        "parent_ref": s.parent_ref,
        "project_dir": p.project_dir,
        "project_hash": p.project_hash,
        "parent_session_key": s.parent_key,
        "root_session_key": s.parent_key or s.key,
        "files": len(files),
        "era": "+".join(f.era for f in files),
        "summary": p.summary,
        **{name: sum(getattr(f, name) for f in files) for name in _SUMMED},
        **{name: next((n for f in files if (n := getattr(f, name))), None) for name in _FIRSTS},
        "live_messages": p.live_messages,
        "billed_messages": len(c[_TIME]),
        "compression_infos": sum(map(bool, c[_INFO])),
        "snapshots": sum(map(bool, c[_SNAP])),
        "live_requests": sum(map(bool, live)),
    }


def _messages(sessions: list[Session]) -> pl.DataFrame:
    out: dict[str, list[Any]] = {name: [] for name in MESSAGES_SCHEMA}
    canonical: list[Any] = []
    for s in sessions:
        d = views.detail(s)
        c = d.columns
        at = range(len(c[_TIME])) if s.kept_messages is None else s.kept_messages
        out["session_key"].extend([s.key] * len(at))
        out["position"].extend(at)
        for k, name in enumerate(MESSAGE_COLUMNS):
            col = c[_WRITTEN] if name == "timestamp" else c[k]
            out[name].extend(col[i] for i in at)
        out["turn"].extend(d.turn[i] for i in at)
        canonical.extend(c[_TIME][i] for i in at)
        out["compression"].extend(bool(c[_INFO][i] or c[_SNAP][i]) for i in at)
        out["_compressions_seen"].extend(d.compressions[i] for i in at)
    out["ts"] = [None] * len(canonical)
    return _frame(out, MESSAGES_SCHEMA).with_columns(_times(canonical))


def _requests(sessions: list[Session]) -> pl.DataFrame:
    out: dict[str, list[Any]] = {name: [] for name in REQUESTS_SCHEMA}
    canonical: list[Any] = []
    for s in sessions:
        d = views.detail(s)
        c = d.columns
        kept = s.kept if s.kept is not None else range(len(d.at))
        ids = {"session_key": s.key, "root_session_key": s.parent_key or s.key}
        ids.update((name, s.row[name]) for name in ("session_id", "project", "kind"))
        for row, j in zip(views.session_requests(s), kept, strict=True):
            i = d.at[j]
            row.update(ids, position=i, ts=None, tool_errors=c[_ERRORS][i])
            canonical.append(c[_TIME][i])
            for name in REQUESTS_SCHEMA:
                out[name].append(row[name])
    return _frame(out, REQUESTS_SCHEMA).with_columns(_times(canonical))


def _times(canonical: list[str | None]) -> pl.Series:
    """The ``ts`` column: the engine's times of one shape (``tally.canonical_times``) as UTC datetimes."""
    return (
        pl.Series("ts", canonical, dtype=pl.String).str.to_datetime(_CANONICAL, time_zone="UTC").cast(TS_TYPE)
    )


def _turns(sessions: list[Session]) -> pl.DataFrame:
    rows = (
        {**row, "session_key": s.key, "project": s.row["project"]}
        for s in sessions
        for row in views.session_turns(s)
    )
    return _rows_frame(rows, TURNS_SCHEMA)


def _calls(sessions: list[Session], *, live: bool) -> pl.DataFrame:
    """The tool-call rows of ``sessions`` as read (``Corpus.calls``), of the messages each keeps
    (``tally._merged``); ``live``: only the calls of live messages (and of none known)."""
    from ctxtool.session.columns import decode_columns

    out: dict[str, list[Any]] = {name: [] for name in CALLS_SCHEMA}
    strings = [i for i, name in enumerate(TOOL_COLUMNS) if TOOL_SCHEMA[name] == pl.String]
    for s in sessions:
        c = views.detail(s).columns
        files, older = s.files, c.older  # type: ignore[attr-defined]  # (tally.Columns)
        # ``live``: the ids of messages known here none of whose rows is live
        dead = set(c[0]) - {c[0][i] for i in range(len(c[0])) if c[_LIVE][i]} - {None} if live else set()
        for rank, f in enumerate(files):
            cols: list[list[Any]] = [[] for _ in TOOL_COLUMNS]
            for chunk in f.tools_cols:
                for col, values in zip(cols, decode_columns(chunk), strict=True):
                    col.extend(values)
            for i in strings:
                cols[i] = [None if v == "" else v for v in cols[i]]
            for k in range(len(cols[0])):
                mid = cols[0][k]
                if (rank < len(files) - 1 and (mid is None or older.get(mid) != rank)) or mid in dead:
                    continue
                out["session_key"].append(s.key)
                for name, col in zip(TOOL_COLUMNS, cols, strict=True):
                    out[name].append(col[k])
    return _frame(out, CALLS_SCHEMA)


def _tool_calls(sessions: list[Session], calls: pl.DataFrame, messages: pl.DataFrame) -> pl.DataFrame:
    """``calls`` with the turn and live flag of their message, and their session's ids."""
    ids = pl.DataFrame(
        {
            "session_key": [s.key for s in sessions],
            **{name: [s.row[name] for s in sessions] for name in _IDS[:-1]},
            "root_session_key": [s.parent_key or s.key for s in sessions],
        },
        schema={"session_key": pl.String, **dict.fromkeys(_IDS, pl.String)},
    )
    return calls.join(
        messages.select("session_key", "message_id", "turn", "live"),
        on=["session_key", "message_id"],
        how="left",
        maintain_order="left",
    ).join(ids, on="session_key", how="left", maintain_order="left")


def tally_of_frames(corpus: Corpus) -> Tally:
    """The engine's tally of a corpus read from an export's dataset (``export.load_dataset``): each session's
    message columns from its messages frame, its requests' costs as priced when exported (billed once), its
    row from the sessions frame."""
    from ctxtool.frames.tally import _TOKENS, Requests, _new_columns, canonical_times, mismatched, requests_at
    from ctxtool.measure.usage import filled

    by_key, by_key_requests = (
        {key[0]: df.sort("position") for key, df in f.partition_by("session_key", as_dict=True).items()}
        for f in (corpus.messages, corpus.requests)
    )
    costs = {key: df.get_column("cost").to_list() for key, df in by_key_requests.items()}
    sessions = []
    for meta in corpus.sessions.iter_rows(named=True):
        key = meta["session_key"]
        frame = by_key.get(key)
        c = _new_columns(0)
        c.extend((frame.get_column(name).to_list() if frame is not None else []) for name in MESSAGE_COLUMNS)
        c.append(c[_TIME])
        c[_TIME] = canonical_times(c[_WRITTEN])
        at = requests_at(c)
        models, times = filled([c[_MODEL][i] for i in at]), [c[_TIME][i] for i in at]
        tokens = [[c[j][i] for i in at] for j in _TOKENS]
        requests = Requests(models, times, tokens, costs.get(key, [])[: len(at)])
        sessions.append(_dataset_session(meta, requests, c, mismatched(requests.tokens)))
    return _dataset_tally(sessions, corpus)


def tally_of_sessions(
    sessions: pl.DataFrame, read: Corpus, sums: Any, mismatches: Mapping[str, int]
) -> Tally:
    """``tally_of_frames`` of a dataset's sessions alone, their requests left where they are: ``sums`` makes
    the groups of the reports that sum requests (``Tally.sums``), ``mismatches`` counts each session's
    mismatched totals; ``read`` holds what reading met."""
    rows = sessions.iter_rows(named=True)
    out = [_dataset_session(meta, None, None, mismatches.get(meta["session_key"], 0)) for meta in rows]
    return _dataset_tally(out, read, sums)


def _dataset_session(meta: dict[str, Any], requests: Any, columns: Any, mismatches: int) -> Session:
    key, parent, project_dir = meta["session_key"], meta["parent_session_key"], meta["project_dir"] or ""
    # ``meta`` is the row itself, not a copy (a big dataset's sessions hold one dict each, not two): nothing
    # changes a dataset session's row in place (a view copies it first: ``views._narrowed``).
    made = Session(
        key, parent, meta, requests, mismatches, project_dir, columns, parent_ref=meta["parent_ref"]
    )
    made.meta = meta
    return made


def _dataset_tally(sessions: list[Session], read: Corpus, sums: Any = None) -> Tally:
    broken = [
        (s.row["file"], m["broken_lines"], m["first_broken_line"] or 0, m["first_overlong_line"])
        for s in sessions
        if (m := s.meta)["broken_lines"]
    ]
    invalid = [
        (s.row["file"], m["invalid_utf8_lines"], m["first_invalid_utf8_line"])
        for s in sessions
        if (m := s.meta)["invalid_utf8_lines"]
    ]
    counts = read.files_read, read.bytes_read, read.broken_lines
    return Tally(
        sessions, list(read.problems), list(read.warnings), *counts, list(read.skipped), broken, invalid, sums
    )
