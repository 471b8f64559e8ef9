"""The frames of a ``Corpus``, built from the engine's columns: every figure in them is the engine's.

The sessions, requests and turns frames take their rows from the tally (``ctxtool.frames.tally``) and its
views (``ctxtool.frames.views``), the messages and tool calls frames the rows the sessions' files hold, so
that a frame and a report can never disagree: polars is the library's face, not a second engine. A filter
or the live view (``narrowed``) is a view of the tally made into frames the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    Problem,
)
from ctxtool.frames.tally import _INFO, _LIVE, _SNAP, _TIME, _WRITTEN, Session, Tally
from ctxtool.session.stamp import MESSAGE_COLUMNS, TOOL_COLUMNS

if TYPE_CHECKING:
    from ctxtool.session.columns import FileColumns

_U32 = pl.UInt32
SESSIONS_SCHEMA: dict[str, Any] = {
    # What a session's files say of it (the times they record are in ``start`` and ``end``), then its figures.
    **{k: v for k, v in SESSION_META_SCHEMA.items() if k not in ("start_time", "last_updated")},
    "billed_messages": _U32,
    "turns": _U32,
    "tool_calls": pl.Int64,
    "tool_errors": pl.Int64,
    "compression_infos": _U32,
    "snapshots": _U32,
    "requests": _U32,
    **dict.fromkeys(TOKEN_COLUMNS, pl.Int64),
    "cost": pl.Float64,
    "unpriced": pl.Int64,
    **dict.fromkeys(("context", "peak_context", "context_limit"), pl.Int64),
    "models": pl.String,
    "live_requests": _U32,
    **dict.fromkeys(COMPOSITION_COLUMNS, pl.Int64),
    "hidden_requests": _U32,
    "hidden_input": pl.Int64,
    "hidden_output": pl.Int64,
    "hidden_cost": pl.Float64,
    "start": TS_TYPE,
    "end": TS_TYPE,
    "compressions": _U32,
    "context_share": pl.Float64,
    "cache_ratio": pl.Float64,
    "subagents": _U32,
}
_IDS = ("session", "session_id", "project", "kind", "root_session_key")
REQUESTS_SCHEMA: dict[str, Any] = {
    "session_key": pl.String,
    **dict.fromkeys(_IDS, pl.String),
    "message_id": pl.String,
    "position": pl.Int64,
    "turn": pl.Int64,
    "timestamp": pl.String,
    "ts": TS_TYPE,
    "live": pl.Boolean,
    "model": pl.String,
    "model_inferred": pl.Boolean,
    **dict.fromkeys(TOKEN_COLUMNS, pl.Int64),
    "context": pl.Int64,
    "context_limit": pl.Int64,
    "context_share": pl.Float64,
    "cache_ratio": pl.Float64,
    "cost": pl.Float64,
    "tool_calls": pl.Int64,
    "tool_errors": pl.Int64,
    **dict.fromkeys(COMPOSITION_COLUMNS, pl.Int64),
    "event": pl.String,
}
TURNS_SCHEMA: dict[str, Any] = {
    "session_key": pl.String,
    "turn": pl.Int64,
    "prompt": pl.String,
    "start": TS_TYPE,
    "end": TS_TYPE,
    "live": pl.Boolean,
    "messages": _U32,
    "tool_calls": pl.Int64,
    "tool_errors": pl.Int64,
    "compressed": pl.Boolean,
    "requests": _U32,
    **dict.fromkeys(TOKEN_COLUMNS, pl.Int64),
    "peak_context": pl.Int64,
    "context_limit": pl.Int64,
    "cost": pl.Float64,
    "unpriced": pl.Int64,
    "models": pl.String,
    **dict.fromkeys(COMPOSITION_COLUMNS, pl.Int64),
    "duration_s": pl.Float64,
    "context_share": pl.Float64,
    "cache_ratio": pl.Float64,
    "session": pl.String,
    "project": pl.String,
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
_CANONICAL = "%Y-%m-%dT%H:%M:%S%.fZ"  # tally.canonical_times: the one shape of a session's times


def corpus_of(t: Tally, results: Sequence[FileColumns], found: Any = None) -> Corpus:
    """The frames of ``t`` (made with ``detail``) and the account of what was read."""
    good = [r for r in results if not r.error]
    corpus = Corpus(
        _sessions(t.sessions),
        _messages(t.sessions),
        _requests(t.sessions),
        lambda: _tool_calls(t.sessions, calls, messages),
        lambda: _turns(t.sessions),
        calls=None,
    )
    calls = _calls(t.sessions, live=False)
    messages = corpus.messages
    corpus.calls = calls
    corpus.tally = t
    corpus.warnings = list(t.warnings)
    corpus.problems = list(t.problems)
    corpus.files_read = t.files_read
    corpus.files_found = len(results)
    corpus.bytes_read = t.bytes_read
    corpus.broken_lines = t.broken_lines
    corpus.skipped = list(t.skipped)
    del good
    return corpus


def narrowed(corpus: Corpus, filters: Mapping[str, Any], *, live: bool) -> Corpus:
    """What ``filters`` (``frames.filter_corpus`` keywords) and ``live`` keep of ``corpus``, as frames of the
    engine's view (``views.view``); the account of what was read stays the whole corpus's."""
    if corpus.view_of is not None:  # a view of a view: of the corpus, with both's filters
        base, before = corpus.view_of
        return narrowed(base, {**before, **{k: v for k, v in filters.items() if v}}, live=live)
    t = corpus.tally
    if t is None:
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
    out = Corpus(
        _sessions(v.sessions),
        _messages(v.sessions),
        _requests(v.sessions),
        tool_calls,
        lambda: _turns(v.sessions),
        files_read=corpus.files_read,
        files_found=corpus.files_found,
        bytes_read=corpus.bytes_read,
        problems=corpus.problems,
        skipped=corpus.skipped,
        warnings=corpus.warnings,
        broken_lines=corpus.broken_lines,
    )
    out.tally = v
    out.view_of = (corpus, dict(filters))
    return out


def report_frame(by: str, rows: list[dict[str, Any]]) -> pl.DataFrame:
    """The rows of ``--by BY`` (the engine's, Gemini CLI's ``input``) as a frame of ``REPORT_COLUMNS[by]``,
    each column of its specification's dtype (``shape.frame_of``)."""
    from ctxtool.frames.shape import REPORT_COLUMNS, RowTable, frame_of

    return frame_of(RowTable(REPORT_COLUMNS[by], rows))


def _frame(columns: dict[str, list[Any]], schema: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame({name: pl.Series(name, columns[name], dtype=dtype) for name, dtype in schema.items()})


def _sessions(sessions: list[Session]) -> pl.DataFrame:
    out: dict[str, list[Any]] = {name: [] for name in SESSIONS_SCHEMA}
    for s in sessions:
        if s.files is None:  # read from a dataset: its row there, with the figures of this view
            out_row = {**s.meta, **s.row}
            for name in SESSIONS_SCHEMA:
                out[name].append(out_row[name])
            continue
        row, files = s.row, s.files
        p = files[-1]
        c = views.detail(s).columns
        r = s.requests
        assert r is not None
        live = [c[_LIVE][i] for i in views.detail(s).at]
        if s.kept is not None:
            live = [live[j] for j in s.kept]
        values = {
            **row,
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
            "broken_lines": sum(f.broken_lines for f in files),
            "invalid_utf8_lines": sum(f.invalid_utf8_lines for f in files),
            "first_invalid_utf8_line": next(
                (f.first_invalid_utf8_line for f in files if f.first_invalid_utf8_line), None
            ),
            "first_broken_line": next((f.first_broken_line for f in files if f.first_broken_line), None),
            "first_overlong_line": next(
                (f.first_overlong_line for f in files if f.first_overlong_line), None
            ),
            "checkpoints": sum(f.checkpoints for f in files),
            "live_messages": p.live_messages,
            "billed_messages": len(c[_TIME]),
            "compression_infos": sum(map(bool, c[_INFO])),
            "snapshots": sum(map(bool, c[_SNAP])),
            "live_requests": sum(map(bool, live)),
        }
        for name in SESSIONS_SCHEMA:
            out[name].append(values[name])
    return _frame(out, SESSIONS_SCHEMA)


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
        rows = views.session_requests(s)
        kept = s.kept if s.kept is not None else range(len(d.at))
        for row, j in zip(rows, kept, strict=True):
            i = d.at[j]
            row.update(
                session_key=s.key,
                session_id=s.row["session_id"],
                project=s.row["project"],
                kind=s.row["kind"],
                root_session_key=s.parent_key or s.key,
                position=i,
                ts=None,
                tool_errors=c[_ERRORS_AT][i],
            )
            canonical.append(c[_TIME][i])
            for name in REQUESTS_SCHEMA:
                out[name].append(row[name])
    return _frame(out, REQUESTS_SCHEMA).with_columns(_times(canonical))


def _times(canonical: list[str | None]) -> pl.Series:
    """The ``ts`` column: the engine's times of one shape (``tally.canonical_times``) as UTC datetimes."""
    return (
        pl.Series("ts", canonical, dtype=pl.String).str.to_datetime(_CANONICAL, time_zone="UTC").cast(TS_TYPE)
    )


_ERRORS_AT = MESSAGE_COLUMNS.index("tool_errors")


def _turns(sessions: list[Session]) -> pl.DataFrame:
    out: dict[str, list[Any]] = {name: [] for name in TURNS_SCHEMA}
    for s in sessions:
        for row in views.session_turns(s):
            values = {**row, "session_key": s.key, "project": s.row["project"]}
            for name in TURNS_SCHEMA:
                out[name].append(values[name])
    return _frame(out, TURNS_SCHEMA)


def _calls(sessions: list[Session], *, live: bool) -> pl.DataFrame:
    """The tool-call rows of ``sessions`` as read (``Corpus.calls``): a session of several files keeps those
    of its last file and those of the older messages it keeps (``tally._merged``); ``live``: only the calls
    of live messages (and of none known)."""
    from ctxtool.session.columns import decode_columns

    out: dict[str, list[Any]] = {name: [] for name in CALLS_SCHEMA}
    strings = [i for i, name in enumerate(TOOL_COLUMNS) if TOOL_SCHEMA[name] == pl.String]
    for s in sessions:
        d = views.detail(s)
        c = d.columns
        files = s.files
        kept_older = _kept_older(c, files) if len(files) > 1 else None
        live_ids = {c[0][i] for i in range(len(c[0])) if c[_LIVE][i]} if live else None
        known = set(c[0]) if live else None
        for rank, f in enumerate(files):
            cols: list[list[Any]] = [[] for _ in TOOL_COLUMNS]
            for chunk in f.tools_cols:
                for col, values in zip(cols, decode_columns(chunk), strict=True):
                    col.extend(values)
            for i in strings:
                cols[i] = [None if v == "" else v for v in cols[i]]
            for k in range(len(cols[0])):
                mid = cols[0][k]
                if (
                    kept_older is not None
                    and rank < len(files) - 1
                    and (mid is None or (rank, mid) not in kept_older)
                ):
                    continue
                if live_ids is not None and mid is not None and mid in known and mid not in live_ids:  # type: ignore[operator]
                    continue
                out["session_key"].append(s.key)
                for name, col in zip(TOOL_COLUMNS, cols, strict=True):
                    out[name].append(col[k])
    return _frame(out, CALLS_SCHEMA)


def _kept_older(c: list[list[Any]], files: list[FileColumns]) -> set[tuple[int, str]]:
    """(file rank, message id) of the older files' messages a session of several files keeps (``c``: its
    merged columns, the last file's rows last, ``tally._merged``)."""
    from ctxtool.frames.tally import _columns

    primary = {mid for mid in c[0][len(c[0]) - files[-1].n_messages :] if mid is not None}
    seen: set[str] = set()
    out: set[tuple[int, str]] = set()
    for rank, f in enumerate(files[:-1]):
        for mid in _columns(f)[0]:
            if mid is not None and mid not in primary and mid not in seen:
                seen.add(mid)
                out.add((rank, mid))
    return out


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


def problems_of(results: Sequence[FileColumns]) -> list[Problem]:
    return [Problem(r.path, r.error) for r in results if r.error]


def tally_of_frames(corpus: Corpus) -> Tally:
    """The engine's tally of a corpus read from an export's dataset (``export.load_dataset``): each session's
    message columns from its messages frame, its requests' costs as they were priced when exported (billed
    once), its row from the sessions frame; so that every report, filter and view of a dataset is made by
    the engine, as of the sessions themselves."""
    from ctxtool.frames.tally import Columns, Requests, canonical_times
    from ctxtool.measure.usage import filled

    by_key = {
        key[0]: df.sort("position")
        for key, df in corpus.messages.partition_by("session_key", as_dict=True, maintain_order=True).items()
    }
    costs = {
        key[0]: df.sort("position").get_column("cost").to_list()
        for key, df in corpus.requests.partition_by("session_key", as_dict=True, maintain_order=True).items()
    }
    sessions = []
    for meta in corpus.sessions.iter_rows(named=True):
        key = meta["session_key"]
        frame = by_key.get(key)
        c = Columns(
            (frame.get_column(name).to_list() if frame is not None else []) for name in MESSAGE_COLUMNS
        )
        c.lost = {}
        c.append(c[MESSAGE_COLUMNS.index("timestamp")])
        c[_TIME] = canonical_times(c[_WRITTEN])
        at = [
            i
            for i, (k, v) in enumerate(zip(c[1], c[_INPUT_AT], strict=True))
            if v is not None and k == "gemini"
        ]
        requests = Requests(
            filled([c[_MODEL_AT][i] for i in at]),
            [c[_TIME][i] for i in at],
            [[c[MESSAGE_COLUMNS.index(k)][i] for i in at] for k in TOKEN_COLUMNS],
            costs.get(key, [])[: len(at)],
        )
        sessions.append(_dataset_session(meta, requests, c))
    return _dataset_tally(sessions, corpus)


def tally_of_sessions(
    sessions: pl.DataFrame, read: Corpus, sums: Any, mismatches: Mapping[str, int]
) -> Tally:
    """``tally_of_frames`` of a dataset's sessions alone, their requests left where they are: ``sums`` makes
    the groups of the reports that sum requests (``Tally.sums``), ``mismatches`` counts each session's
    requests whose recorded total is not the sum of its parts. What ``stats`` reads without a filter,
    ``--live`` or the turn and request grains; ``read`` holds what reading met."""
    out = []
    for meta in sessions.iter_rows(named=True):
        s = _dataset_session(meta, None, None)
        s.mismatches = mismatches.get(s.key, 0)
        out.append(s)
    t = _dataset_tally(out, read)
    t.sums = sums
    return t


def _dataset_session(meta: dict[str, Any], requests: Any, columns: Any) -> Session:
    from ctxtool.frames.tally import mismatched

    s = Session(
        meta["session_key"],
        meta["parent_session_key"],
        dict(meta),
        requests,
        project_dir=meta["project_dir"] or "",
    )
    s.columns, s.meta, s.parent_ref = columns, meta, meta["parent_ref"]
    s.mismatches = mismatched(requests.tokens) if requests is not None else 0
    return s


def _dataset_tally(sessions: list[Session], read: Corpus) -> Tally:
    return Tally(
        sessions=sessions,
        problems=list(read.problems),
        warnings=list(read.warnings),
        files_read=read.files_read,
        bytes_read=read.bytes_read,
        broken_lines=read.broken_lines,
        skipped=list(read.skipped),
        broken=[
            (
                s.row["file"],
                s.meta["broken_lines"],
                s.meta["first_broken_line"] or 0,
                s.meta["first_overlong_line"],
            )
            for s in sessions
            if s.meta["broken_lines"]
        ],
        invalid_utf8=[
            (s.row["file"], s.meta["invalid_utf8_lines"], s.meta["first_invalid_utf8_line"])
            for s in sessions
            if s.meta["invalid_utf8_lines"]
        ],
    )


_INPUT_AT = MESSAGE_COLUMNS.index("input")
_MODEL_AT = MESSAGE_COLUMNS.index("model")
