"""``stats --by session`` (and the reports that sum requests by one key) without polars.

A first ``ctxtool stats`` on a home of a few dozen sessions spends more time importing polars (0.2 s of
its runtime's initialisation) than reading every file. This module computes the same report rows from the
files' columns (``ctxtool.session.columns``) in plain Python, by the rules the frames apply
(``frames.build._derive``, ``frames.messages.with_composition``, ``frames.sessions.sessions_frame``,
``frames.query._session_report`` and ``_agg_requests``), so that such a run never imports polars.

It covers the common case and says when it does not: anything the frames would read differently (a session
made of several files, a time in another format than Gemini CLI writes, a count beyond 64 bits, a column
value of an unexpected type) raises :class:`Unsupported`, and the caller builds the frames from the same
results instead. Tests hold its reports equal to the frames' on the fixtures and the real sessions.

Costs are summed exactly (``math.fsum``), as the totals row is (``frames.shape.totals_of``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ctxtool.common.wording import plural
from ctxtool.frames.grouping import group_sessions, link_parents, parent_ref_of
from ctxtool.frames.reading import Problem, discovery_problems
from ctxtool.frames.shape import COMPOSITION_COLUMNS, REPORT_COLUMNS, totals_of
from ctxtool.measure.tokens import DEFAULT_TOKEN_LIMIT, MODEL_LIMITS, TOTAL_PARTS, describe_total_mismatches
from ctxtool.session.columns import decode_rows
from ctxtool.session.schema import TOKEN_KEYS as TOKEN_COLUMNS
from ctxtool.session.stamp import MESSAGE_COLUMNS

if TYPE_CHECKING:
    from ctxtool.measure.pricing import PriceTable
    from ctxtool.session.columns import FileColumns
    from ctxtool.session.discover import Discovery

# The reports this module makes; the others (turn, request, --top, filters, --live) need the frames.
BY = ("session", "model", "project", "day", "week", "month")
OFF_ENV = "CTXTOOL_NO_TALLY"  # set: every report is made with the frames (to compare the two ways)
HIDDEN_CALLS_PER_COMPRESSION = 2  # = frames.sessions.HIDDEN_CALLS_PER_COMPRESSION (a test holds them equal)


class Unsupported(Exception):
    """The rows hold something only the frames read as Gemini CLI meant it: build them instead."""


_I = {name: i for i, name in enumerate(MESSAGE_COLUMNS)}
_STRINGS = tuple(_I[c] for c in ("message_id", "type", "timestamp", "model", "preview"))
_BOOLS = tuple(_I[c] for c in ("live", "is_prompt", "is_command", "is_snapshot", "compression_info"))
_INTS = tuple(i for i, name in enumerate(MESSAGE_COLUMNS) if i not in _STRINGS and i not in _BOOLS)
_ID, _TYPE, _TIME, _LIVE, _CHARS = _I["message_id"], _I["type"], _I["timestamp"], _I["live"], _I["text_chars"]
_PROMPT, _SNAP, _INFO, _MODEL = _I["is_prompt"], _I["is_snapshot"], _I["compression_info"], _I["model"]
_CALLS, _ERRORS, _INPUT = _I["tool_calls"], _I["tool_errors"], _I["input"]
_TOKENS = tuple(_I[c] for c in TOKEN_COLUMNS)
_TOTAL = _I["total"]
_PARTS = tuple(_I[c] for c in TOTAL_PARTS)
_HIST = tuple(_I[c] for c in ("hist_prompts", "hist_model", "hist_tool_io"))
_INT64 = (-(2**63), 2**63 - 1)

# How Gemini CLI writes every time (JavaScript's Date.toISOString()); anything else goes to the frames,
# whose parser (frames.model.parse_times) also reads offsets and times without a zone.
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z")


def parse_time(text: str | None) -> datetime | None:
    """A time as Gemini CLI writes it, in UTC; None for None; :class:`Unsupported` for any other shape."""
    if text is None:
        return None
    m = _ISO.fullmatch(text)
    if m is None:
        raise Unsupported(f"time {text!r}")
    y, mo, d, h, mi, s, ms = (int(g) for g in m.groups())
    try:
        return datetime(y, mo, d, h, mi, s, ms * 1000, tzinfo=UTC)
    except ValueError as exc:
        raise Unsupported(f"time {text!r}") from exc


def _rows(fc: FileColumns) -> list[list[Any]]:
    """A file's message rows, each value as the frames hold it (no empty strings), or Unsupported."""
    low, high = _INT64
    rows = [list(r) for r in decode_rows(fc.messages_cols)]
    for r in rows:
        for i in _STRINGS:
            if r[i] == "":
                r[i] = None
            elif r[i] is not None and type(r[i]) is not str:
                raise Unsupported(f"{fc.path}: {MESSAGE_COLUMNS[i]}")
        for i in _BOOLS:
            if type(r[i]) is not bool:
                raise Unsupported(f"{fc.path}: {MESSAGE_COLUMNS[i]}")
        for i in _INTS:
            v = r[i]
            if v is not None and (type(v) is not int or not low <= v <= high):
                raise Unsupported(f"{fc.path}: {MESSAGE_COLUMNS[i]}")
    return rows


@dataclass(slots=True)
class Session:
    """One session's row of ``stats --by session`` before subagents are added to their parents, with what
    the request reports and the read summary need."""

    key: str
    parent_key: str | None
    row: dict[str, Any]
    requests: list[Request] = field(default_factory=list)
    mismatches: int = 0  # requests whose recorded total is not the sum of its parts


@dataclass(slots=True)
class Request:
    """One billed request: the columns the reports that sum requests by one key read."""

    session_key: str
    project: str | None
    model: str | None
    ts: datetime | None
    tokens: tuple[int | None, ...]  # TOKEN_COLUMNS
    cost: float | None
    tool_calls: int | None


@dataclass
class Tally:
    """What ``stats`` reads of a set of sessions, as plain rows: the sessions (subagents apart), the
    problems met, the warnings of pricing, and the account of the files."""

    sessions: list[Session]
    problems: list[Problem]
    warnings: list[str]
    files_read: int
    bytes_read: int
    broken_lines: int
    skipped: list[tuple[str, str]]
    broken: list[tuple[str, int, int]]  # (file, broken lines, first) per session
    invalid_utf8: list[tuple[str, int, int | None]]  # (file, lines, first) per session

    @property
    def requests(self) -> list[Request]:
        return [r for s in self.sessions for r in s.requests]


def tally(
    results: list[FileColumns],
    found: Discovery | None,
    prices: Callable[[Iterable[str]], PriceTable],
    *,
    subagents: bool = True,
) -> Tally:
    """The sessions of ``results`` as report rows (``prices(models)`` resolves the rates); Unsupported
    when the frames must read them. Consumes nothing: the results keep their columns."""
    good = [r for r in results if not r.error]
    groups = group_sessions(good)
    refs = {s.key: parent_ref_of(s.primary) for s in groups}
    if not subagents:
        groups = [s for s in groups if refs[s.key] is None and s.primary.kind != "subagent"]
    parents = link_parents((s.key, s.primary.project_dir, s.primary.session_id, refs[s.key]) for s in groups)
    rows = {s.key: _merged([_rows(f) for f in s.files]) for s in groups}
    models = {r[_MODEL] for rs in rows.values() for r in rs if r[_MODEL] is not None}
    table = prices(sorted(models))
    sessions: list[Session] = []
    warnings = _Warnings()
    for s in groups:
        p = s.primary
        kind = "subagent" if refs[s.key] is not None or p.kind == "subagent" else p.kind
        session = _session(s.key, parents.get(s.key), kind, s.files, rows.pop(s.key), table, warnings)
        sessions.append(session)
    _count_subagents(sessions)
    problems = [Problem(r.path, r.error) for r in results if r.error]
    if found is not None:
        problems.extend(discovery_problems(found))
    return Tally(
        sessions=sessions,
        problems=problems,
        warnings=warnings.lines(table),
        files_read=len(good),
        bytes_read=sum(r.size for r in good),
        broken_lines=sum(r.broken_lines for r in good),
        skipped=[(str(p), why) for p, why in found.skipped] if found is not None else [],
        broken=[b for s in groups if (b := _broken(s.files))[1]],
        invalid_utf8=[u for s in groups if (u := _invalid_utf8(s.files))[1]],
    )


def _broken(files: list[FileColumns]) -> tuple[str, int, int]:
    """(file, broken lines, first) of a session (``frames.query.broken_files``)."""
    first = next((f.first_broken_line for f in files if f.first_broken_line), None)
    return files[-1].path, sum(f.broken_lines for f in files), first or 0


def _invalid_utf8(files: list[FileColumns]) -> tuple[str, int, int | None]:
    first = next((f.first_invalid_utf8_line for f in files if f.first_invalid_utf8_line), None)
    return files[-1].path, sum(f.invalid_utf8_lines for f in files), first


def _merged(files: list[list[list[Any]]]) -> list[list[Any]]:
    """The rows of a session kept in several files (a legacy .json and the .jsonl written when it was
    resumed), oldest first: the last file's rows, preceded by the older rows only an older file has, each
    once and not live (``frames.messages.merge_pairs``)."""
    if len(files) == 1:
        return files[0]
    primary = files[-1]
    ids = {r[_ID] for r in primary if r[_ID] is not None}
    seen: set[str] = set()
    out = []
    for rows in files[:-1]:
        for r in rows:
            mid = r[_ID]
            if mid is not None:
                if mid in ids or mid in seen:
                    continue
                seen.add(mid)
            r[_LIVE] = False
            out.append(r)
    return out + primary


class _Warnings:
    """What pricing warns about, as ``pricing.add_costs`` words it: unknown models, requests without a model
    name, and models with impossible counts."""

    def __init__(self) -> None:
        self.models: set[str] = set()
        self.nameless = 0
        self.impossible: dict[str, int] = {}

    def lines(self, table: PriceTable) -> list[str]:
        names = sorted(self.models)
        out = [table.unknown_model_warning(m) for m in names if m in table.unknown]
        if self.nameless:
            n = self.nameless
            out.append(
                f"{plural(n, 'request')} {'has' if n == 1 else 'have'} no model name, so "
                f"{'its' if n == 1 else 'their'} cost is left empty (check the session file)"
            )
        for name, count in sorted(self.impossible.items()):
            out.append(
                f"{plural(count, 'request')} of model {name!r} {'has' if count == 1 else 'have'} impossible "
                "token counts (negative, or cached above input + tool), so "
                f"{'its' if count == 1 else 'their'} cost is left empty (check the session file)"
            )
        return out


def _cost(table: PriceTable, model: str | None, tokens: Sequence[int | None]) -> tuple[float | None, bool]:
    """(``pricing.add_costs``' cost of one request, whether its counts are impossible: a missing ``output``
    leaves its own test out, as a null does in the frames)."""
    from ctxtool.measure.pricing import cost_of

    input, output, cached, thoughts, tool, _ = tokens
    if input is None:
        return None, False
    cache = cached or 0
    impossible = min(input, cache, thoughts or 0, tool or 0) < 0 or cache > input + (tool or 0)
    impossible = impossible or (output is not None and output < 0)
    if model is None or output is None or impossible:
        return None, impossible
    return cost_of(table.rates.get(model), input, cached, output, thoughts, tool), False


def _filled(models: list[str | None]) -> list[str | None]:
    """Each request's model, a missing one taken from the request before it, else the one after
    (``frames.build._derive``: ``forward_fill().backward_fill()`` over the session)."""
    out = models[:]
    last = None
    for i, m in enumerate(out):
        if m is None:
            out[i] = last
        else:
            last = m
    nxt = None
    for i in range(len(out) - 1, -1, -1):
        if out[i] is None:
            out[i] = nxt
        else:
            nxt = out[i]
    return out


def _composition(reqs: list[list[Any]]) -> list[tuple[int, int, int, int]]:
    """(overhead, prompts, model, tool I/O) of each request's prompt
    (``frames.messages.with_composition``)."""
    gaps = []
    for r in reqs:
        history = sum(r[i] or 0 for i in _HIST)
        if r[_INPUT] > 0 and r[_INPUT] - history >= 0:
            gaps.append(r[_INPUT] - history)
    floor = max(min(gaps, default=0), 0)
    out = []
    for r in reqs:
        hist = [r[i] for i in _HIST]
        if None in hist:
            raise Unsupported("a request without its history estimate")
        history = sum(hist)
        rest = r[_INPUT] - min(floor, r[_INPUT])
        scale = rest / history if history > 0 else 0.0
        parts = [math.floor(h * scale) for h in hist]
        out.append((r[_INPUT] - sum(parts), parts[0], parts[1], parts[2]))
    return out


@dataclass(slots=True)
class _Walk:
    """One pass over a session's messages: what ``sessions_frame`` aggregates of them."""

    turns: set[int] = field(default_factory=set)
    tool_calls: int = 0
    tool_errors: int = 0
    infos: int = 0
    snapshots: int = 0
    first: datetime | None = None
    last: datetime | None = None
    hidden: list[tuple[int | None, int | None, str | None]] = field(default_factory=list)
    requests: list[list[Any]] = field(default_factory=list)
    times: list[datetime | None] = field(default_factory=list)  # of the requests


def _walk(rows: list[list[Any]], derived: bool) -> _Walk:
    w = _Walk()
    turn = 0
    last_input: int | None = None
    last_model: str | None = None
    for r in rows:
        turn += r[_PROMPT]
        is_request = r[_TYPE] == "gemini" and r[_INPUT] is not None
        if turn > 0 or is_request or r[_INFO] or r[_SNAP]:
            w.turns.add(turn)
        w.tool_calls += r[_CALLS] or 0
        w.tool_errors += r[_ERRORS] or 0
        w.infos += r[_INFO]
        w.snapshots += r[_SNAP]
        ts = parse_time(r[_TIME])
        if ts is not None:
            w.first = ts if w.first is None or ts < w.first else w.first
            w.last = ts if w.last is None or ts > w.last else w.last
        if r[_INPUT] is not None:
            last_input = r[_INPUT]
            if r[_MODEL] is not None:
                last_model = r[_MODEL]
        if r[_SNAP] and not (derived and last_input is None):
            _hidden_call(w, r[_CHARS], last_input, last_model)
        if is_request:
            w.requests.append(r)
            w.times.append(ts)
    return w


def _hidden_call(w: _Walk, chars: int | None, last_input: int | None, model: str | None) -> None:
    """The compression calls a snapshot shows Gemini CLI made
    (``frames.sessions._hidden_compression_calls``)."""
    if chars is None:
        w.hidden.append((None, None, model))
        return
    summary = chars // 4
    w.hidden.append((HIDDEN_CALLS_PER_COMPRESSION * (last_input or 0) + summary, 2 * summary, model))


def _session(
    key: str,
    parent_key: str | None,
    kind: str,
    files: list[FileColumns],
    rows: list[list[Any]],
    table: PriceTable,
    warnings: _Warnings,
) -> Session:
    p = files[-1]
    w = _walk(rows, p.derived_from is not None)
    models = _filled([r[_MODEL] for r in w.requests])
    session = Session(key, parent_key, {})
    for r, model, ts in zip(w.requests, models, w.times, strict=True):
        tokens = tuple(r[i] for i in _TOKENS)
        cost, impossible = _cost(table, model, tokens)
        if model is None:
            warnings.nameless += 1
        else:
            warnings.models.add(model)
            if impossible and model in table.rates:
                warnings.impossible[model] = warnings.impossible.get(model, 0) + 1
        session.requests.append(Request(key, p.project, model, ts, tokens, cost, r[_CALLS]))
        if (r[_TOTAL] or 0) != sum(r[i] or 0 for i in _PARTS):
            session.mismatches += 1
    session.row = _session_row(key, kind, files, w, session.requests, models, table)
    return session


def _session_row(
    key: str,
    kind: str,
    files: list[FileColumns],
    w: _Walk,
    requests: list[Request],
    models: list[str | None],
    table: PriceTable,
) -> dict[str, Any]:
    """The columns of ``sessions_frame`` for one session (its last file names it)."""
    p = files[-1]
    started = min((f.start_time for f in files if f.start_time), default=None)
    updated = max((f.last_updated for f in files if f.last_updated), default=None)
    live = [r[_INPUT] for r in w.requests if r[_LIVE]]
    limits = [
        MODEL_LIMITS.get(m, DEFAULT_TOKEN_LIMIT) if m is not None else DEFAULT_TOKEN_LIMIT for m in models
    ]
    row: dict[str, Any] = {
        "session_key": key,
        "session": os.path.basename(p.path).rsplit(".", 1)[0],
        "session_id": p.session_id,
        "derived_from": p.derived_from,
        "project": p.project,
        "kind": kind,
        "subagents": 0,
        "start": _earliest(parse_time(started), w.first),
        "end": w.last if w.last is not None else parse_time(updated),
        "turns": len(w.turns),
        "requests": len(requests),
    }
    for i, name in enumerate(TOKEN_COLUMNS):
        row[name] = sum(r.tokens[i] for r in requests if r.tokens[i] is not None)
    known = [r.cost for r in requests if r.cost is not None]
    unpriced = len(requests) - len(known)
    row["context"] = live[-1] if live else None
    row["peak_context"] = max(live) if live else None
    row["context_limit"] = max(limits, default=DEFAULT_TOKEN_LIMIT)
    share = row["peak_context"]
    row["context_share"] = None if share is None else share / row["context_limit"]
    row["cache_ratio"] = row["cached"] / row["input"] if row["input"] > 0 else None
    row["compressions"] = max(w.infos, w.snapshots)
    row["rewinds"] = sum(f.rewinds for f in files)
    row["tool_calls"], row["tool_errors"] = w.tool_calls, w.tool_errors
    row["models"] = ",".join(sorted({m for m in models if m is not None})) if requests else None
    row["cost"] = None if not known and unpriced else math.fsum(known)
    row["unpriced"] = unpriced
    row.update(_hidden_sums(w, table))
    row["file"] = p.path
    parts = _composition(w.requests)
    for i, name in enumerate(COMPOSITION_COLUMNS):
        row[name] = sum(c[i] for c in parts)
    return row


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


def _hidden_sums(w: _Walk, table: PriceTable) -> dict[str, Any]:
    costs = []
    for input, output, model in w.hidden:
        tokens = (input, output, 0, 0, 0, None)
        cost = _cost(table, model, tokens)[0] if input is not None and model in table.rates else None
        if cost is not None:
            costs.append(cost)
    return {
        "hidden_requests": len(w.hidden) * HIDDEN_CALLS_PER_COMPRESSION,
        "hidden_input": sum(i for i, _, _ in w.hidden if i is not None),
        "hidden_output": sum(o for _, o, _ in w.hidden if o is not None),
        "hidden_cost": math.fsum(costs),
    }


def _count_subagents(sessions: list[Session]) -> None:
    counts: dict[str, int] = {}
    for s in sessions:
        if s.parent_key is not None:
            counts[s.parent_key] = counts.get(s.parent_key, 0) + 1
    for s in sessions:
        s.row["subagents"] = counts.get(s.key, 0)


# What a subagent session adds to its parent's row (``frames.query._ROLLED_UP``), cost apart.
_ROLLED_UP = (*TOKEN_COLUMNS, "requests", "turns", "tool_calls", "tool_errors", "unpriced")


def session_rows(t: Tally, *, roll_up: bool = True) -> list[dict[str, Any]]:
    """The rows of ``stats --by session`` (``frames.query._session_report``, then ``with_uncached_input``)."""
    children: dict[str, list[Session]] = {}
    if roll_up:
        for s in t.sessions:
            if s.parent_key is not None:
                children.setdefault(s.parent_key, []).append(s)
    rows = []
    for s in t.sessions:
        if roll_up and children and s.parent_key is not None:
            continue
        row = dict(s.row)
        kids = children.get(s.key)
        if kids:
            for k in _ROLLED_UP:
                row[k] += sum(c.row[k] for c in kids)
            sub = [c.row["cost"] for c in kids if c.row["cost"] is not None]
            if row["cost"] is not None or sub:
                row["cost"] = math.fsum([row["cost"] or 0.0, math.fsum(sub)])
            row["cache_ratio"] = row["cached"] / row["input"] if row["input"] > 0 else None
        rows.append(row)
    rows.sort(key=_session_order)
    return [_shown(row, "session") for row in rows]


def _session_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """``sort("start", "session", "session_key", nulls_last=True)``."""
    return tuple((row[k] is None, row[k] or "") for k in ("start", "session", "session_key"))


def _shown(row: dict[str, Any], by: str) -> dict[str, Any]:
    """The columns ``stats`` shows, ``input`` without ``cached`` (``frames.query.with_uncached_input``)."""
    out: dict[str, Any] = {}
    for col in REPORT_COLUMNS[by]:
        if col == "input":
            out["input"] = row["input"] - (row["cached"] or 0)
        elif col == "cached":
            out["cached"] = row["cached"]
            out["prompt_tokens"] = row["input"]
        else:
            out[col] = row[col]
    return out


_WEEK = timedelta(days=7)


def _key_of(by: str) -> Callable[[Request], Any]:
    if by == "model":
        return lambda r: r.model if r.model is not None else "(unknown)"
    if by == "project":
        return lambda r: r.project
    if by == "day":
        return lambda r: None if r.ts is None else r.ts.date()
    if by == "week":  # polars' weeks start on Monday: the date of that Monday
        return lambda r: None if r.ts is None else r.ts.date() - timedelta(days=r.ts.weekday())
    return lambda r: None if r.ts is None else r.ts.strftime("%Y-%m")


def request_rows(t: Tally, by: str) -> list[dict[str, Any]]:
    """The rows of ``stats --by model|project|day|week|month`` in UTC (``frames.query._agg_requests``)."""
    key_of = _key_of(by)
    groups: dict[Any, list[Request]] = {}
    for r in t.requests:
        groups.setdefault(key_of(r), []).append(r)
    rows = []
    for key in sorted(groups, key=lambda k: (k is not None, k if k is not None else "")):  # nulls first
        reqs = groups[key]
        row: dict[str, Any] = {by: key, "sessions": len({r.session_key for r in reqs}), "requests": len(reqs)}
        for i, name in enumerate(TOKEN_COLUMNS):
            row[name] = sum(r.tokens[i] for r in reqs if r.tokens[i] is not None)
        row["peak_context"] = max((r.tokens[0] for r in reqs if r.tokens[0] is not None), default=None)
        known = [r.cost for r in reqs if r.cost is not None]
        row["unpriced"] = len(reqs) - len(known)
        row["cost"] = None if not known and row["unpriced"] else math.fsum(known)
        row["cache_ratio"] = row["cached"] / row["input"] if row["input"] > 0 else None
        rows.append(_shown(row, by))
    return rows


def warnings_of(t: Tally) -> list[str]:
    """``frames.query.read_warnings`` of the same sessions."""
    from ctxtool.frames.reading import broken_lines_warning, invalid_utf8_warning

    mismatched = [
        (file, n)
        for file, _, n in sorted((s.row["file"], s.key, s.mismatches) for s in t.sessions if s.mismatches)
    ]
    return [
        *(str(p) for p in t.problems),
        *(broken_lines_warning(path, n, first) for path, n, first in t.broken),
        *(invalid_utf8_warning(path, n, first) for path, n, first in t.invalid_utf8),
        *([describe_total_mismatches(mismatched)] if mismatched else []),
        *t.warnings,
    ]


def summary_of(t: Tally) -> dict[str, Any]:
    """``frames.query.read_summary`` of the same sessions."""
    from ctxtool.frames.reading import summary

    requests = t.requests
    return summary(
        files=t.files_read,
        size=t.bytes_read,
        sessions=len(t.sessions),
        subagent_sessions=sum(s.row["kind"] == "subagent" for s in t.sessions),
        requests=len(requests),
        total_tokens=sum(r.tokens[5] for r in requests if r.tokens[5] is not None),
        broken_lines=t.broken_lines,
        invalid_utf8_lines=sum(n for _, n, _ in t.invalid_utf8),
        total_mismatches=sum(s.mismatches for s in t.sessions),
        skipped=t.skipped,
        problems=t.problems,
    )


def hidden_calls(t: Tally) -> tuple[int, float]:
    """``frames.query.hidden_calls`` of the same sessions."""
    return (
        sum(s.row["hidden_requests"] for s in t.sessions),
        math.fsum(s.row["hidden_cost"] for s in t.sessions),
    )


def report_totals(columns: Sequence[str], rows: list[dict[str, Any]]) -> dict[str, Any]:
    return totals_of(columns, lambda col: [row[col] for row in rows])
