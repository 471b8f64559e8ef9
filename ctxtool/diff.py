"""Compare two session files message by message: what was removed, kept, changed or added, and what it cost.

Owns: aligning two live histories (by message id, falling back to a hash of the content), classifying each
message, token deltas (recorded in the files and estimated the way Gemini CLI estimates locally), the context
share before and after, and the fact-retention check of what the second file no longer holds. Pure: takes
two ``SessionFile`` values and returns a ``SessionDiff``; never reads files, prints or imports rich.

Two token measures, never mixed:

* **recorded**: the ``tokens`` fields written in the files, summed over the billed view (every request the
  file records, rewound or checkpointed ones included), counted as ``stats`` counts them
  (``ctxtool.measure.tokens.report_tokens``). Only ``gemini`` messages carry them, so recorded tokens have
  no per-tool split.
* **estimated**: Gemini CLI's local estimate (``estimate_token_count``) of the live history in wire form
  (``convert_session_to_client_history``). Each message is estimated on its own (floored per wire turn),
  so the per-message figures add up to the per-group figures; the session total is one estimate over the
  whole history, as Gemini CLI computes it, and may exceed the sum of the parts by less than one token per
  wire turn.

A message written again without the record of its request (``REQUEST_RECORD_KEYS``) is kept, not changed.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import orjson

from ctxtool.common.markup import escape_markdown, markdown_code_block
from ctxtool.common.wording import plural
from ctxtool.compress.gemini_cli.chat_compression import DEFAULT_CHAT_MODEL, estimate_token_count
from ctxtool.compress.strategies.base import gemini_estimate, record_wire, wire_history
from ctxtool.compress.summarize.facts import (
    FACT_KINDS,
    FactKind,
    Retention,
    extract_facts,
    history_text,
    retention,
)
from ctxtool.measure.tokens import (
    REPORT_TOKEN_KEYS,
    describe_total_mismatches,
    report_tokens,
    token_limit,
    total_disagrees,
)
from ctxtool.session.columns import clip_preview, message_text
from ctxtool.session.read import SessionFile

Status = Literal["removed", "kept", "changed", "added"]
Match = Literal["id", "hash"]
STATUSES: tuple[Status, ...] = ("removed", "kept", "changed", "added")
# What a message written again loses of the request that produced it: Gemini CLI rewrites kept messages
# without them on a ``$set.messages`` checkpoint (chatRecordingService.ts ``updateMessagesFromHistory``; seen
# on the resumes tests/recorded holds) and ``ctxtool.compact.as_copies`` drops ``tokens``. The request was
# billed once, in the file that recorded it, so their loss alone is not a change.
REQUEST_RECORD_KEYS = ("tokens", "model", "toolCalls")
SNAPSHOT_TAG = "<state_snapshot>"
# The model turn Gemini CLI appends after the snapshot (chatCompressionService.ts, HEAD 5411f113ca).
ACK_TEXT = "Got it. Thanks for the additional context!"
PREVIEW_CHARS = 100


@dataclass(frozen=True, slots=True)
class Change:
    """One field of a kept message that differs. ``before``/``after`` are character counts when the field is
    content (text, tool output), else None; ``detail`` says what changed in words."""

    field: str
    detail: str
    before: int | None = None
    after: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return _fields(self)


@dataclass(frozen=True, slots=True)
class MessageDiff:
    status: Status
    match: Match | None
    before_index: int | None
    after_index: int | None
    id: str | None
    type: str
    note: str  # "state snapshot", "compression ack" or ""
    preview: str
    tools: tuple[str, ...]
    chars_before: int | None
    chars_after: int | None
    estimated_before: int | None
    estimated_after: int | None
    recorded_before: int | None  # the total of this message's request, if it records one (report_tokens)
    recorded_after: int | None
    changes: tuple[Change, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {**_fields(self), "tools": list(self.tools), "changes": [c.as_dict() for c in self.changes]}


@dataclass(frozen=True, slots=True)
class GroupDelta:
    """Tokens of one message type, wire role or tool, before and after. ``recorded_*`` is None for tools."""

    dimension: Literal["type", "role", "tool"]
    key: str
    recorded_before: int | None
    recorded_after: int | None
    estimated_before: int
    estimated_after: int

    def as_dict(self) -> dict[str, Any]:
        rb, ra, eb, ea = (
            self.recorded_before,
            self.recorded_after,
            self.estimated_before,
            self.estimated_after,
        )
        head = {"dimension": self.dimension, "key": self.key, "recorded_before": rb, "recorded_after": ra}
        rec = None if rb is None or ra is None else ra - rb
        tail = {"estimated_before": eb, "estimated_after": ea, "estimated_delta": ea - eb}
        return {**head, "recorded_delta": rec, **tail}


@dataclass(frozen=True, slots=True)
class SideSummary:
    """One file's figures."""

    path: str
    session_id: str | None
    era: str
    live_messages: int
    billed_messages: int
    model: str | None
    context_limit: int
    recorded: dict[str, int]  # sums over billed requests, plus "requests" and "context" (last live prompt)
    total_mismatches: int  # billed requests whose recorded total is not the sum of its parts
    estimated: int

    @property
    def recorded_context_share(self) -> float | None:
        ctx = self.recorded.get("context")
        return None if not ctx else ctx / self.context_limit

    @property
    def estimated_context_share(self) -> float:
        return self.estimated / self.context_limit

    def as_dict(self) -> dict[str, Any]:
        shares = {"recorded": self.recorded_context_share, "estimated": self.estimated_context_share}
        return {**_fields(self), "recorded": dict(self.recorded), "context_share": shares}


@dataclass(frozen=True, slots=True)
class SessionDiff:
    before: SideSummary
    after: SideSummary
    messages: tuple[MessageDiff, ...]
    groups: tuple[GroupDelta, ...]
    snapshots: tuple[str, ...]  # text of <state_snapshot> messages the after file added
    retention: Retention | None  # facts of the removed and changed messages found in the after history
    facts_from: int = 0  # how many messages the facts were extracted from

    @property
    def counts(self) -> dict[str, int]:
        return {status: sum(m.status == status for m in self.messages) for status in STATUSES}

    @property
    def differs(self) -> bool:
        return any(m.status != "kept" for m in self.messages)

    def warnings(self) -> list[str]:
        """What reading the two files should warn about: recorded totals that disagree with their parts
        (one line naming the files, as ``stats`` says it)."""
        files = [(s.path, s.total_mismatches) for s in (self.before, self.after) if s.total_mismatches]
        if len(files) == 2 and files[0][0] == files[1][0]:
            files = files[:1]  # a file against itself
        return [describe_total_mismatches(files)] if files else []

    def as_dict(self) -> dict[str, Any]:
        from ctxtool.frames.model import SCHEMA_VERSION

        rec_b, rec_a = self.before.recorded, self.after.recorded
        return {
            "schema_version": SCHEMA_VERSION,
            "command": "diff",
            "differs": self.differs,
            "counts": self.counts,
            "before": self.before.as_dict(),
            "after": self.after.as_dict(),
            "tokens": {
                "recorded_delta": {
                    k: rec_a.get(k, 0) - rec_b.get(k, 0) for k in (*REPORT_TOKEN_KEYS, "requests")
                },
                "estimated_delta": self.after.estimated - self.before.estimated,
                "groups": [g.as_dict() for g in self.groups],
            },
            "snapshots": list(self.snapshots),
            "retention": None
            if self.retention is None
            else {"from_messages": self.facts_from, **_retention_dict(self.retention)},
            "messages": [m.as_dict() for m in self.messages],
        }


def _fields(obj: Any) -> dict[str, Any]:
    """A dataclass's fields in declaration order (the JSON form's order)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _retention_dict(r: Retention) -> dict[str, Any]:
    out = r.as_dict()
    for kind in FACT_KINDS:
        out[kind]["kept_facts"] = list(r.kind(kind).kept)
    return out


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def content_hash(msg: Mapping[str, Any]) -> str:
    """Hash of what a message says (type, content, tool calls), not of when or under which id."""
    calls = msg.get("toolCalls")
    calls = calls if isinstance(calls, list) else []
    calls = [{k: v for k, v in c.items() if k != "timestamp"} if isinstance(c, dict) else c for c in calls]
    body = {"type": msg.get("type"), "content": msg.get("content"), "toolCalls": calls}
    return hashlib.sha256(_canonical(body)).hexdigest()


def value_chars(value: Any) -> int:
    """Characters of every string inside a JSON value (a message's content, a tool result)."""
    if isinstance(value, str):
        return len(value)
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return sum(map(value_chars, items))


def result_chars(result: Any) -> int:
    """Characters of a tool result: the strings of each functionResponse's ``response`` and of text parts
    (ids and names excluded), so a truncation shows as exactly the characters it removed."""
    if isinstance(result, str):
        return len(result)
    parts = [result] if isinstance(result, dict) else result if isinstance(result, list) else []
    total = 0
    for part in parts:
        if isinstance(part, str):
            total += len(part)
        elif isinstance(part, dict):
            fr = part.get("functionResponse")
            if isinstance(fr, dict):
                total += value_chars(fr.get("response"))
            elif isinstance(part.get("text"), str):
                total += len(part["text"])
    return total


def _preview(msg: Mapping[str, Any]) -> str:
    text = " ".join(message_text(msg.get("content")).split())
    if not text and (names := _tool_names(msg)):
        text = "[" + ", ".join(names) + "]"
    return clip_preview(text, PREVIEW_CHARS)  # never inside a token: a cut key could not be redacted


def _tool_names(msg: Mapping[str, Any]) -> tuple[str, ...]:
    calls = msg.get("toolCalls")
    calls = calls if isinstance(calls, list) else []
    names = [c["name"] for c in calls if isinstance(c, dict) and isinstance(c.get("name"), str)]
    content = msg.get("content")
    parts = [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []
    for inner in (p.get(key) for p in parts for key in ("functionResponse", "functionCall")):
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            names.append(inner["name"])
    return tuple(dict.fromkeys(names))


def _note(msg: Mapping[str, Any]) -> str:
    text = message_text(msg.get("content")).strip()
    if msg.get("type") == "user" and text.startswith(SNAPSHOT_TAG):
        return "state snapshot"
    if msg.get("type") == "gemini" and text == ACK_TEXT:
        return "compression ack"
    return ""


def _recorded(msg: Mapping[str, Any]) -> dict[str, int] | None:
    """The request a message records, counted as ``stats`` counts it; None for a message that records none."""
    return report_tokens(msg.get("tokens")) if msg.get("type") == "gemini" else None


def _recorded_total(msg: Mapping[str, Any]) -> int | None:
    counts = _recorded(msg)
    return None if counts is None else counts["total"]


@dataclass(slots=True)
class _Estimate:
    total: int = 0
    by_role: dict[str, int] = field(default_factory=dict)
    by_tool: dict[str, int] = field(default_factory=dict)


def _estimate_message(msg: Mapping[str, Any]) -> _Estimate:
    """Gemini CLI's local estimate of the wire turns one message becomes, split by role and by tool."""
    est = _Estimate()
    for content in record_wire(dict(msg)):
        role = str(content.get("role", "user"))
        parts = content.get("parts") or []
        n = estimate_token_count(parts)
        est.total += n
        est.by_role[role] = est.by_role.get(role, 0) + n
        for part in (p for p in parts if isinstance(p, dict)):
            for inner in (part.get(key) for key in ("functionCall", "functionResponse")):
                if isinstance(inner, dict):
                    name = inner.get("name") if isinstance(inner.get("name"), str) else "(unnamed)"
                    est.by_tool[str(name)] = est.by_tool.get(str(name), 0) + estimate_token_count([part])
    return est


def _last_model(sf: SessionFile) -> str | None:
    models = (m.get("model") for m in reversed(sf.billed) if m.get("type") == "gemini")
    return next((m for m in models if isinstance(m, str) and m), None)


def _side(sf: SessionFile, model: str | None) -> SideSummary:
    recorded = dict.fromkeys((*REPORT_TOKEN_KEYS, "requests", "context"), 0)
    mismatches = 0
    for msg in sf.billed:
        counts = _recorded(msg)
        if counts is not None:
            recorded["requests"] += 1
            for k in REPORT_TOKEN_KEYS:
                recorded[k] += counts[k]
            mismatches += total_disagrees(
                counts["total"], counts["prompt_tokens"], counts["output"], counts["thoughts"], counts["tool"]
            )
    # The prompt of the last live request, as stats' ``context``: a live message written again without its
    # tokens (a checkpoint's copy) is the request its first record billed.
    billed = {m["id"]: m for m in sf.billed if isinstance(m.get("id"), str)}
    for msg in reversed(sf.messages):
        mid = msg.get("id")
        counts = _recorded(billed.get(mid, msg) if isinstance(mid, str) else msg)
        if counts is not None:
            recorded["context"] = counts["prompt_tokens"]
            break
    return SideSummary(
        path=str(sf.path),
        session_id=sf.session_id,
        era=sf.era,
        live_messages=len(sf.messages),
        billed_messages=len(sf.billed),
        model=model,
        context_limit=token_limit(model),
        recorded=recorded,
        total_mismatches=mismatches,
        # One estimate over the whole history, as Gemini CLI computes it (not the sum of per-message
        # floors): the measure `compact` and `compare` report as tokens before/after.
        estimated=gemini_estimate([dict(m) for m in sf.messages], model or DEFAULT_CHAT_MODEL),
    )


def align(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> list[tuple[int | None, int | None, Match | None]]:
    """Pairs (before index, after index, how matched) in display order; every index appears exactly once.

    Ids first; messages left over are matched by ``content_hash`` (first unused copy, in order). The order
    follows the after file, with removed messages shown where they stood: before the first later message
    that both files share."""
    pair_of_after: dict[int, tuple[int, Match]] = {}
    matched_before: set[int] = set()
    keys: tuple[tuple[Match, Callable[[Mapping[str, Any]], str | None]], ...] = (
        ("id", lambda m: m.get("id") if isinstance(m.get("id"), str) else None),
        ("hash", content_hash),
    )
    for how, key in keys:
        unmatched: dict[str, list[int]] = {}
        for j, msg in enumerate(after):
            if j not in pair_of_after and (k := key(msg)) is not None:
                unmatched.setdefault(k, []).append(j)
        for i, msg in enumerate(before):
            if i not in matched_before and (k := key(msg)) is not None and unmatched.get(k):
                pair_of_after[unmatched[k].pop(0)] = (i, how)
                matched_before.add(i)

    # For each after position, the before index of the next matched message (where removed ones go).
    next_before = [len(before)] * (len(after) + 1)
    for j in range(len(after) - 1, -1, -1):
        next_before[j] = pair_of_after[j][0] if j in pair_of_after else next_before[j + 1]

    out: list[tuple[int | None, int | None, Match | None]] = []
    removed = [i for i in range(len(before)) if i not in matched_before]

    def flush(upto: int) -> None:
        while removed and removed[0] < upto:
            out.append((removed.pop(0), None, None))

    for j in range(len(after)):
        flush(next_before[j])
        matched, by = pair_of_after.get(j, (None, None))
        out.append((matched, j, by))
    flush(len(before))
    return out


def dropped_request_record(b: Mapping[str, Any], a: Mapping[str, Any]) -> set[str]:
    """The ``REQUEST_RECORD_KEYS`` that ``b`` holds and its later copy ``a`` dropped, and whose loss changes
    nothing the message sends: ``tokens`` and ``model`` always (they are never sent), ``toolCalls`` only when
    the message's wire turns (``convert_session_to_client_history``) are the same without them, i.e. its
    content holds the calls and its responses are messages of their own."""
    dropped = set()
    for key in REQUEST_RECORD_KEYS:
        if not b.get(key) or a.get(key):
            continue
        if key == "toolCalls":
            without = {k: v for k, v in b.items() if k != key}
            if _canonical(wire_history([dict(b)])) != _canonical(wire_history([without])):
                continue  # the calls and their outputs were part of the history: a change
        dropped.add(key)
    return dropped


def _changes(b: Mapping[str, Any], a: Mapping[str, Any]) -> tuple[Change, ...]:
    changes: list[Change] = []
    dropped = dropped_request_record(b, a)
    if b.get("id") != a.get("id"):
        changes.append(Change("id", f"id {b.get('id')} → {a.get('id')}"))
    if _canonical(b.get("content")) != _canonical(a.get("content")):
        cb, ca = value_chars(b.get("content")), value_chars(a.get("content"))
        changes.append(Change("content", _size_detail("content", cb, ca), cb, ca))
    if "toolCalls" not in dropped:
        changes.extend(_tool_changes(b, a))
    for key in sorted((set(b) | set(a)) - {"id", "content", "toolCalls"} - dropped):
        if _canonical(b.get(key)) != _canonical(a.get(key)):
            if key in ("thoughts", "displayContent"):
                cb, ca = value_chars(b.get(key)), value_chars(a.get(key))
                changes.append(Change(key, _size_detail(key, cb, ca), cb, ca))
            elif key == "tokens":
                changes.append(Change(key, f"tokens.total {_recorded_total(b)} → {_recorded_total(a)}"))
            else:
                how = "changed" if key in a and key in b else "added" if key in a else "removed"
                changes.append(Change(key, f"{key} {how}"))
    return tuple(changes)


def _size_detail(what: str, before: int, after: int) -> str:
    if before == after:
        return f"{what} rewritten ({plural(after, 'char')})"
    verb = "truncated" if after < before else "grew"
    return f"{what} {verb}: {before:,} → {plural(after, 'char')} ({after - before:+,})"


def _tool_changes(b: Mapping[str, Any], a: Mapping[str, Any]) -> list[Change]:
    calls_b = [c for c in (b.get("toolCalls") or []) if isinstance(c, dict)]
    calls_a = [c for c in (a.get("toolCalls") or []) if isinstance(c, dict)]
    if _canonical(calls_b) == _canonical(calls_a):
        return []
    out: list[Change] = []
    after_by_id = {c.get("id"): c for c in calls_a if isinstance(c.get("id"), str)}
    seen: set[Any] = set()
    for pos, cb in enumerate(calls_b):
        cid = cb.get("id")
        ca = after_by_id.get(cid) if isinstance(cid, str) else (calls_a[pos] if pos < len(calls_a) else None)
        name = cb.get("name") if isinstance(cb.get("name"), str) else "tool"
        where = f"toolCalls[{cid if isinstance(cid, str) else pos}]"
        if ca is None:
            out.append(Change(where, f"{name} call removed", result_chars(cb.get("result")), None))
            continue
        seen.add(id(ca))
        if _canonical(cb.get("result")) != _canonical(ca.get("result")):
            rb, ra = result_chars(cb.get("result")), result_chars(ca.get("result"))
            out.append(Change(f"{where}.result", _size_detail(f"{name} output", rb, ra), rb, ra))
        rest_b = {k: v for k, v in cb.items() if k != "result"}
        rest_a = {k: v for k, v in ca.items() if k != "result"}
        if _canonical(rest_b) != _canonical(rest_a):
            keys = sorted(k for k in set(rest_b) | set(rest_a) if rest_b.get(k) != rest_a.get(k))
            out.append(Change(where, f"{name} call changed ({', '.join(keys)})"))
    for ca in calls_a:
        if id(ca) not in seen:
            name = ca.get("name") if isinstance(ca.get("name"), str) else "tool"
            out.append(Change("toolCalls", f"{name} call added", None, result_chars(ca.get("result"))))
    return out


def diff_sessions(before: SessionFile, after: SessionFile) -> SessionDiff:
    """Compare the live histories of two session files (see the module docstring)."""
    bm, am = before.messages, after.messages
    est_b = [_estimate_message(m) for m in bm]
    est_a = [_estimate_message(m) for m in am]
    messages: list[MessageDiff] = []
    for i, j, how in align(bm, am):
        b = bm[i] if i is not None else None
        a = am[j] if j is not None else None
        changes = _changes(b, a) if b is not None and a is not None else ()
        status: Status = (
            "removed" if a is None else "added" if b is None else "changed" if changes else "kept"
        )
        shown = a if a is not None else b
        assert shown is not None
        mid = mid if isinstance(mid := shown.get("id"), str) else None
        mtype = mtype if isinstance(mtype := shown.get("type"), str) else "unknown"
        head = (status, how, i, j, mid, mtype, _note(shown), _preview(shown), _tool_names(shown))
        chars_b, chars_a = (None if m is None else value_chars(m.get("content")) for m in (b, a))
        estimated = (None if i is None else est_b[i].total, None if j is None else est_a[j].total)
        rec_b, rec_a = (None if m is None else _recorded_total(m) for m in (b, a))
        messages.append(MessageDiff(*head, chars_b, chars_a, *estimated, rec_b, rec_a, changes))

    model = _last_model(after) or _last_model(before)
    snapshots = tuple(
        message_text(am[m.after_index].get("content")).strip()
        for m in messages
        if m.status == "added" and m.note == "state snapshot" and m.after_index is not None
    )
    gone = [
        dict(bm[m.before_index])
        for m in messages
        if m.status in ("removed", "changed") and m.before_index is not None
    ]
    kept_retention: Retention | None = None
    if gone:
        after_text = history_text(wire_history([dict(m) for m in am]))
        kept_retention = retention(extract_facts(wire_history(gone)), after_text)
    return SessionDiff(
        before=_side(before, model),
        after=_side(after, model),
        messages=tuple(messages),
        groups=_groups(before, after, est_b, est_a),
        snapshots=snapshots,
        retention=kept_retention,
        facts_from=len(gone),
    )


def _groups(
    before: SessionFile, after: SessionFile, est_b: Sequence[_Estimate], est_a: Sequence[_Estimate]
) -> tuple[GroupDelta, ...]:
    def recorded_by(sf: SessionFile, dim: str) -> dict[str, int]:
        # Only gemini messages (model turns) record a request.
        totals = [t for msg in sf.billed if (t := _recorded_total(msg)) is not None]
        return {"gemini" if dim == "type" else "model": sum(totals)} if totals else {}

    def estimated_by(sf: SessionFile, ests: Sequence[_Estimate], dim: str) -> dict[str, int]:
        out: Counter[str] = Counter()
        for msg, est in zip(sf.messages, ests, strict=True):
            mtype = msg.get("type")
            kind = mtype if isinstance(mtype, str) else "unknown"
            out.update({"type": {kind: est.total}, "role": est.by_role, "tool": est.by_tool}[dim])
        return out

    groups: list[GroupDelta] = []
    dims: tuple[Literal["type", "role", "tool"], ...] = ("type", "role", "tool")
    for dim in dims:
        eb, ea = estimated_by(before, est_b, dim), estimated_by(after, est_a, dim)
        rb = recorded_by(before, dim) if dim != "tool" else None
        ra = recorded_by(after, dim) if dim != "tool" else None
        for key in sorted(set(eb) | set(ea) | set(rb or {}) | set(ra or {})):
            rec_b, rec_a = (None if r is None else r.get(key, 0) for r in (rb, ra))
            groups.append(GroupDelta(dim, key, rec_b, rec_a, eb.get(key, 0), ea.get(key, 0)))
    return tuple(groups)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def _delta(before: int | None, after: int | None) -> str:
    return "" if before is None or after is None else f"{after - before:+,}"


def summary_rows(d: SessionDiff) -> list[tuple[str, str, str, str]]:
    """(measure, before, after, delta) rows: message counts, recorded and estimated tokens, context share."""
    b, a = d.before, d.after
    estimated_shares = (_pct(b.estimated_context_share), _pct(a.estimated_context_share))

    def counted(measure: str, before: int, after: int) -> tuple[str, str, str, str]:
        return measure, f"{before:,}", f"{after:,}", _delta(before, after)

    return [
        counted("live messages", b.live_messages, a.live_messages),
        counted("recorded requests", b.recorded["requests"], a.recorded["requests"]),
        counted("recorded tokens (total)", b.recorded["total"], a.recorded["total"]),
        counted("recorded context (last prompt)", b.recorded["context"], a.recorded["context"]),
        counted("estimated context", b.estimated, a.estimated),
        (f"context share (estimated, of {a.context_limit:,})", *estimated_shares, ""),
        ("context share (recorded)", _pct(b.recorded_context_share), _pct(a.recorded_context_share), ""),
    ]


def group_rows(d: SessionDiff) -> list[tuple[str, ...]]:
    """(group, recorded before, recorded after, estimated before, estimated after, estimated delta) per
    message type, wire role and tool; recorded is blank where the files record nothing (tools)."""

    def figure(n: int | None) -> str:
        return "" if n is None else f"{n:,}"

    rows: list[tuple[str, ...]] = []
    for g in d.groups:
        figures = map(figure, (g.recorded_before, g.recorded_after, g.estimated_before, g.estimated_after))
        rows.append((f"{g.dimension} {g.key}", *figures, _delta(g.estimated_before, g.estimated_after)))
    return rows


def counts_line(d: SessionDiff) -> str:
    return ", ".join(f"{d.counts.get(status, 0)} {status}" for status in STATUSES)


def message_content(m: MessageDiff) -> str:
    """What the message list shows for a message: a note, the preview and what changed."""
    bits = (f"[{m.note}]" if m.note else "", "[matched by content]" if m.match == "hash" else "", m.preview)
    return " ".join(b for b in (*bits, "; ".join(c.detail for c in m.changes)) if b)


def message_rows(d: SessionDiff) -> list[dict[str, Any]]:
    """Rows of the message list, for the table and markdown views."""
    rows = []
    for m in d.messages:
        if m.status == "removed":
            est = f"-{m.estimated_before or 0:,}"
        elif m.status == "added":
            est = f"+{m.estimated_after or 0:,}"
        elif m.estimated_before != m.estimated_after:
            est = f"{(m.estimated_after or 0) - (m.estimated_before or 0):+,}"
        else:
            est = f"{m.estimated_after or 0:,}"
        rows.append(
            {
                "status": m.status,
                "before_index": m.before_index,
                "after_index": m.after_index,
                "type": m.type,
                "estimate": est,
                "content": message_content(m),
            }
        )
    return rows


def retention_lines(d: SessionDiff) -> list[str]:
    """Per fact kind: how many survive, and every lost fact."""
    r = d.retention
    if r is None:
        return ["Fact retention: nothing was removed or changed."]
    checked = plural(d.facts_from, "removed or changed message")
    lines = [f"Fact retention ({checked} checked against the after history):"]
    for kind in FACT_KINDS:
        lines.append(f"  {_kind_line(kind, r)}")
        lines.extend(f"    lost: {fact}" for fact in r.kind(kind).lost)
    return lines


def _kind_line(kind: FactKind, r: Retention) -> str:
    k = r.kind(kind)
    pct = "–" if k.percent is None else f"{k.percent:.0f}%"
    return f"{kind}: {len(k.kept)}/{k.total} kept ({pct})"


def markdown(d: SessionDiff, *, preview_chars: int = 80, hide: Callable[[str], str] = str) -> str:
    """The diff as GitHub-flavoured markdown: summary, snapshot, retention, message list. Every text from the
    sessions is passed through ``hide`` (e.g. secret redaction), then escaped (``ctxtool.common.markup``)."""

    def md(text: str) -> str:
        return escape_markdown(hide(text))

    lines = [
        f"## ctxtool diff: {'sessions differ' if d.differs else 'no differences'}",
        "",
        f"{md(d.before.path)} → {md(d.after.path)}: {counts_line(d)}.",
        "",
        "| | before | after | delta |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {md(m)} | {b} | {a} | {x} |" for m, b, a, x in summary_rows(d)]
    lines += [
        "",
        "| group | recorded before | recorded after | estimated before | estimated after | estimated delta |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += ["| " + " | ".join(md(cell) for cell in row) + " |" for row in group_rows(d)]
    lines.append("")
    for i, snap in enumerate(d.snapshots, 1):
        title = f"### State snapshot {i}" if len(d.snapshots) > 1 else "### State snapshot"
        lines += [title, "", markdown_code_block(hide(snap), "xml"), ""]
    lines += ["### Fact retention", ""]
    r = d.retention
    if r is None:
        lines.append("- nothing was removed or changed")
    else:
        for kind in FACT_KINDS:
            lines.append(f"- {_kind_line(kind, r)}")
            lines += [f"  - lost: {md(fact)}" for fact in r.kind(kind).lost]
    lines += [
        "",
        "### Messages",
        "",
        "| status | #before | #after | type | est. tokens | content |",
        "|---|---:|---:|---|---:|---|",
    ]
    for row in message_rows(d):
        content = clip_preview(row["content"], preview_chars)
        b, a = ("" if row[k] is None else row[k] for k in ("before_index", "after_index"))
        lines.append(
            f"| {row['status']} | {b} | {a} | {md(row['type'])} | {row['estimate']} | {md(content)} |"
        )
    lines.append("")
    return "\n".join(lines)
