"""What a filter or the live view keeps of a tally, and the turn and request grains, in plain Python.

The engine's other half (``ctxtool.frames.tally`` measures the sessions): ``view`` keeps what the filters
and ``--live`` keep, as a ``Tally`` whose every session row takes its request figures from the requests kept
(``request_figures``), so a filter never leaves a figure of requests it does not count; a subagent follows
its parent. ``turn_rows`` and ``request_rows`` are the rows of ``--by turn|request``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import date, timedelta
from itertools import accumulate
from typing import Any

import msgspec

from ctxtool.common.errors import UsageError
from ctxtool.frames import tally
from ctxtool.frames.shape import COMPOSITION_COLUMNS
from ctxtool.frames.tally import _HIST, _I, _WRITTEN, Requests, Session, Tally, parse_time
from ctxtool.measure.tokens import cache_ratio, token_limit
from ctxtool.measure.usage import known_cost, request_figures
from ctxtool.session.schema import TOKEN_KEYS as TOKEN_COLUMNS

_ORDER = "tool_calls tool_errors message_id compression_info live model is_prompt is_snapshot timestamp"
_CALLS, _ERRORS, _ID, _INFO, _LIVE, _MODEL, _PROMPT, _SNAP, _TIME = (_I[c] for c in _ORDER.split())
_PREVIEW, _REWINDS, _CHECKPOINTS = _I["preview"], _I["rewinds_seen"], _I["checkpoints_seen"]
_INPUT_AT, _CACHED_AT = (TOKEN_COLUMNS.index(k) for k in ("input", "cached"))


class Detail(msgspec.Struct):
    """A session's message columns (its files merged) and where its requests are among them."""

    columns: list[list[Any]]
    at: list[int]  # the message of each request
    turn: list[int]  # each message's turn: the prompts before it and itself
    parts: list[tuple[int, int, int, int]]  # each request's (overhead, prompts, model, tool I/O)
    events: list[str | None]  # each request's ``event``
    inferred: list[bool]  # each request's model taken from a neighbour
    compressions: list[int]  # each message's compressions so far, its own included


def view(t: Tally, filters: Mapping[str, Any], *, live: bool) -> Tally:
    """What ``filters`` (``StatsQuery.filters``) and ``live`` keep of ``t`` (made with ``detail``)."""
    since, until = _iso(filters.get("since")), _iso(filters.get("until"))
    models = tuple(filters.get("models") or ())  # (a model equal to one starts with it)
    keys = kept_keys(t.sessions, filters.get("projects") or (), filters.get("sessions") or ())
    dated = since is not None or until is not None
    sessions = []
    for s in (kept for kept in t.sessions if kept.key in keys):
        d = detail(s)
        c = d.columns
        msgs = list(range(len(c[_TIME])))
        if dated:
            msgs = [i for i in msgs if _within(c[_TIME][i], since, until)]
            if not msgs:
                continue
        r = s._requests()
        reqs = list(range(len(d.at)))
        if dated:
            reqs = [j for j in reqs if _within(r.times[j], since, until)]
        if models:
            reqs = [j for j in reqs if (model := r.models[j]) is not None and model.startswith(models)]
            if not reqs:
                continue
        turns = None
        if dated and not models:
            turns = [row for row in _turns(s, d, None, None) if _within(_iso(row["start"]), since, until)]
        elif models:
            turns = [row for row in _turns(s, d, msgs, reqs) if row["requests"] > 0]
        if live:
            reqs = [j for j in reqs if c[_LIVE][d.at[j]]]
            msgs = [i for i in msgs if c[_LIVE][i]]
            turns = _turns(s, d, msgs, reqs)
        sessions.append(_narrowed(s, d, reqs, turns, msgs))
    files = {s.row["file"] for s in sessions}
    broken, invalid = [b for b in t.broken if b[0] in files], [u for u in t.invalid_utf8 if u[0] in files]
    return msgspec.structs.replace(t, sessions=sessions, broken=broken, invalid_utf8=invalid)


def detail(s: Session) -> Detail:
    """What the views read of ``s``'s message columns, derived once."""
    if s.detail is not None:
        assert isinstance(s.detail, Detail)
        return s.detail
    c, r = s.columns, s.requests
    if c is None or r is None:
        raise ValueError("a view needs the sessions' columns: make the tally with detail=True")
    at = tally.requests_at(c)
    turn = list(accumulate(map(bool, c[_PROMPT]), initial=0))[1:]
    hist = [[c[h][i] for i in at] for h in _HIST]
    parts = tally.composition_parts(r.tokens[0], hist)  # type: ignore[arg-type]
    inferred = [c[_MODEL][i] is None and m is not None for i, m in zip(at, r.models, strict=True)]
    compressed = (bool(info or snap) for info, snap in zip(c[_INFO], c[_SNAP], strict=True))
    seen = list(accumulate(compressed, initial=0))[1:]
    made = s.detail = Detail(c, at, turn, parts, _events(c, at, r.models, seen), inferred, seen)
    return made


def _events(c: list[list[Any]], at: list[int], models: list[str | None], seen: list[int]) -> list[str | None]:
    """Each request's ``event`` since the request before it: ``compression``, ``rewind``, ``rollback`` (a
    checkpoint that shrank the history), ``model``."""
    out: list[str | None] = []
    prev: int | None = None
    for k, i in enumerate(at):
        compressed = seen[i] > (seen[prev] if prev is not None else 0)
        names = ["compression"] if compressed else []
        rewinds, before = c[_REWINDS][i], c[_REWINDS][prev] if prev is not None else None
        if rewinds is not None and rewinds > (before or 0):
            names.append("rewind")
        if prev is not None and not compressed:
            checks, earlier = c[_CHECKPOINTS][i], c[_CHECKPOINTS][prev]
            if checks is not None and checks > (earlier or 0) and _history(c, i) < _history(c, prev):
                names.append("rollback")
        if k and models[k] is not None and models[k - 1] is not None and models[k] != models[k - 1]:
            names.append("model")
        out.append(",".join(names) or None)
        prev = i
    return out


def _history(c: list[list[Any]], i: int) -> int:
    return sum(c[h][i] or 0 for h in _HIST)


def _within(ts: str | None, since: str | None, until: str | None) -> bool:
    """A time (ISO, in UTC) falls on a day in [since, until] (ISO days; an open end is not checked)."""
    return ts is not None and (since is None or ts[:10] >= since) and (until is None or ts[:10] <= until)


def _iso(at: date | None) -> str | None:
    return None if at is None else at.isoformat()


def _narrowed(
    s: Session, d: Detail, reqs: list[int], turns: list[dict[str, Any]] | None, msgs: list[int]
) -> Session:
    """``s`` with only the requests ``reqs`` (``request_figures``), its turns from ``turns`` (None: kept)."""
    r = s._requests()
    assert r.costs is not None
    kept = Requests(
        [r.models[j] for j in reqs],
        [r.times[j] for j in reqs],
        [[col[j] for j in reqs] for col in r.tokens],
        [r.costs[j] for j in reqs],
    )
    live = [d.columns[_LIVE][d.at[j]] for j in reqs]
    row = dict(s.row)
    row.update(request_figures(kept.models, kept.tokens, live))
    row["cost"], row["unpriced"] = known_cost(kept.costs or [])
    row.update({name: sum(d.parts[j][i] for j in reqs) for i, name in enumerate(COMPOSITION_COLUMNS)})
    if turns is not None:
        row["turns"] = len(turns)
    mismatches = tally.mismatched(kept.tokens)
    return msgspec.structs.replace(
        s, row=row, requests=kept, mismatches=mismatches, detail=d, kept=reqs, turns=turns, kept_messages=msgs
    )


# --- which sessions -------------------------------------------------------------------------------


def kept_keys(sessions: list[Session], projects: Sequence[str], wanted: Sequence[str]) -> set[str]:
    """The sessions ``--project`` and ``--session`` keep, and the subagents of each."""
    keep = sessions
    if projects:
        keep = [s for s in keep if any(p in s.row["project"] or s.project_dir == p for p in projects)]
    if wanted:
        matched = {s.key for w in wanted for s in _session_matches(keep, w)}
        keep = [s for s in keep if s.key in matched]
    roots = {s.key for s in keep}
    return {s.key for s in sessions if s.key in roots or (s.parent_key or s.key) in roots}


def _session_matches(sessions: list[Session], wanted: str) -> list[Session]:
    """Sessions that ``--session WANTED`` names: a session id or a unique prefix of one, a file name with or
    without its extension, or the file's path (an ambiguous prefix is a usage error)."""
    path = os.path.abspath(os.path.expanduser(wanted))
    found = [
        s
        for s in sessions
        if wanted in (s.row["session_id"], s.row["session"], s.key)
        or s.row["file"] == path
        or s.row["file"].split("/")[-1] == wanted
    ]
    if found:
        return found
    prefixed = [
        s for s in sessions if s.row["session_id"] is not None and s.row["session_id"].startswith(wanted)
    ]
    roots = [s for s in prefixed if s.parent_key is None]
    if len(roots) > 1 and len({s.row["session_id"] for s in roots}) == 1:
        raise _shared_id(wanted, roots)
    if len(roots) > 1:
        names = ", ".join(f"{s.row['session_id']} ({s.row['session']})" for s in roots[:10])
        raise UsageError(
            f"--session {wanted} is ambiguous: {len(roots)} sessions have an id starting with it: {names}",
            "Give more characters of the id",
        )
    return prefixed


def _shared_id(wanted: str, roots: list[Session]) -> UsageError:
    """The usage error for a ``--session`` prefix whose sessions all share one whole id (the a2a server gives
    each session it records ``a2a-server``): their files tell them apart."""
    shared = roots[0].row["session_id"]
    ordered = sorted(roots, key=lambda s: (s.row["start"] is None, s.row["start"] or 0))
    lines = []
    for s in ordered[:10]:
        start = s.row["start"]
        when = f"started {start:%Y-%m-%d %H:%M} UTC" if start is not None else "no start recorded"
        lines.append(f"  {s.row['file']}  ({when}, project {s.row['project']})")
    if len(roots) > 10:
        lines.append(f"  … and {len(roots) - 10} more")
    return UsageError(
        f"--session {wanted} matches {len(roots)} sessions that all have the id {shared}, so more "
        "characters of it cannot tell them apart",
        f"Name one by its file: --session with its path or file name (or pass that file as PATH); "
        f"--session {shared} takes all {len(roots)}:\n" + "\n".join(lines),
    )


# --- the turn and request grains --------------------------------------------------------------------


def _turns(s: Session, d: Detail, msgs: list[int] | None, reqs: list[int] | None) -> list[dict[str, Any]]:
    """The turn rows of ``s`` over the messages ``msgs`` and requests ``reqs`` (None: all of them)."""
    c = d.columns
    per: dict[int, dict[str, Any]] = {}
    for i in range(len(c[_TIME])) if msgs is None else msgs:
        n = d.turn[i]
        g = per.get(n)
        if g is None:
            g = per[n] = {"prompt": None, "first": None, "times": [], "live": None, "calls": 0, "errors": 0,
                          "compressed": False, "reqs": [], "messages": 0}  # fmt: skip
        g["messages"] += 1
        preview = c[_PREVIEW][i]
        if preview is not None:
            if c[_PROMPT][i] and g["prompt"] is None:
                g["prompt"] = preview
            if g["first"] is None:
                g["first"] = preview
        if c[_PROMPT][i] or preview is not None:
            g["live"] = c[_LIVE][i] if g["live"] is None else (g["live"] or c[_LIVE][i])
        if c[_TIME][i] is not None:
            g["times"].append(c[_TIME][i])
        g["calls"] += c[_CALLS][i] or 0
        g["errors"] += c[_ERRORS][i] or 0
        g["compressed"] = g["compressed"] or bool(c[_INFO][i] or c[_SNAP][i])
    for j in range(len(d.at)) if reqs is None else reqs:
        if (g := per.get(d.turn[d.at[j]])) is not None:
            g["reqs"].append(j)
    return [
        _turn_row(s, d, n, g) for n, g in per.items() if tally.is_turn(n, bool(g["reqs"]), g["compressed"])
    ]


def _turn_row(s: Session, d: Detail, n: int, g: dict[str, Any]) -> dict[str, Any]:
    r = s._requests()
    assert r.costs is not None
    reqs: list[int] = g["reqs"]
    start, end = (parse_time(min(g["times"])), parse_time(max(g["times"]))) if g["times"] else (None, None)
    tokens = [[col[j] for j in reqs] for col in r.tokens]
    row: dict[str, Any] = {
        **{k: s.row[k] for k in _OF_SESSION},
        "turn": n,
        "prompt": g["prompt"] if g["prompt"] is not None else g["first"],
        "start": start,
        "end": end,  # (the turns frame's; no report shows it)
        "messages": g["messages"],
        "duration_s": None if start is None or end is None else (end - start) // _MS / 1000.0,
        "requests": len(reqs),
    }
    row.update((name, sum(filter(None, values))) for name, values in zip(TOKEN_COLUMNS, tokens, strict=True))
    row["peak_context"] = max((v for v in tokens[0] if v is not None), default=None)
    row["context_limit"] = max((token_limit(r.models[j]) for j in reqs), default=None)
    peak, limit = row["peak_context"], row["context_limit"]
    row["context_share"] = None if peak is None or limit is None else peak / limit
    row["cache_ratio"] = cache_ratio(row["cached"], row["input"])
    row.update(tool_calls=g["calls"], tool_errors=g["errors"], compressed=g["compressed"])
    row["live"] = True if g["live"] is None else g["live"]
    names = sorted({r.models[j] for j in reqs if r.models[j] is not None})  # type: ignore[type-var]
    row["models"] = ",".join(names) if reqs else None  # type: ignore[arg-type]
    row["cost"], row["unpriced"] = known_cost([r.costs[j] for j in reqs])
    row.update({name: sum(d.parts[j][i] for j in reqs) for i, name in enumerate(COMPOSITION_COLUMNS)})
    return row


_MS = timedelta(milliseconds=1)
# The columns a turn or request row takes of its session.
_OF_SESSION = ("session", "derived_from", "compacted_at")


def turn_rows(t: Tally) -> list[dict[str, Any]]:
    """The rows of ``stats --by turn``, by session (name, then key) and turn."""
    return [row for s in _by_name(t) for row in sorted(session_turns(s), key=lambda row: row["turn"])]


def _by_name(t: Tally) -> list[Session]:
    return sorted(t.sessions, key=lambda s: (s.row["session"], s.key))


def session_turns(s: Session) -> list[dict[str, Any]]:
    """The turn rows of ``s``: a view's, or every one of its history."""
    if s.turns is None:
        s.turns = _turns(s, detail(s), None, None)
    return s.turns


def request_rows(t: Tally) -> list[dict[str, Any]]:
    """The rows of ``stats --by request``, by session (name, then key) and position."""
    return [row for s in _by_name(t) for row in session_requests(s)]


def session_requests(s: Session) -> list[dict[str, Any]]:
    """The request rows of ``s`` (a view's: those it keeps), in the order they were made."""
    d = detail(s)
    r = s._requests()
    assert r.costs is not None
    c = d.columns
    rows = []
    for k, j in enumerate(s.kept if s.kept is not None else range(len(r.models))):
        i = d.at[j]
        tokens = [col[k] for col in r.tokens]
        row: dict[str, Any] = {
            **{k: s.row[k] for k in _OF_SESSION},
            "turn": d.turn[i],
            "message_id": c[_ID][i],
            "timestamp": c[_WRITTEN][i],
            "model": r.models[k],
            "model_inferred": d.inferred[j],
        }
        row.update(zip(TOKEN_COLUMNS, tokens, strict=True))
        row["context"] = prompt = tokens[_INPUT_AT]
        row["context_limit"] = limit = token_limit(r.models[k])
        row["context_share"] = None if prompt is None else prompt / limit
        cached = tokens[_CACHED_AT]
        row["cache_ratio"] = None if cached is None or not prompt else cache_ratio(cached, prompt)
        row.update(tool_calls=c[_CALLS][i], live=c[_LIVE][i], cost=r.costs[k])
        row.update(zip(COMPOSITION_COLUMNS, d.parts[j], strict=True), event=d.events[j])
        rows.append(row)
    return rows
