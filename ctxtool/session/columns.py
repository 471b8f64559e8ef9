"""Flatten one session file into rows, cheaply, so worker processes hand back compact columns, not objects.

Owns: what a message *is* for reporting (a prompt, a command, a compression event, a request with tokens),
the per-file summary, and the worker entry point ``extract_file``.

Speed: session files are mostly tool output that a token report never looks at. Records are decoded with
msgspec into small typed structs that *skip* those fields (about 2.4x faster than a full parse); a tool
result is kept only as its raw JSON bytes, measured, never decoded. The fold is the full reader's
``ctxtool.session.read.Replayed``, so both views obey one statement of Gemini CLI's rules. A record that does
not fit the structs (a fork's odd types) is converted leniently, never dropped. The rows go back as
JSON-encoded columns (``_assemble``). When they change, bump ``stamp.COLUMNS_VERSION``.

Must not: import polars (the parent builds the frames)."""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Container, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import orjson

from ctxtool.common.digest import blake2b
from ctxtool.common.errors import SessionFormatError
from ctxtool.measure.estimator import estimate_text, estimate_token_count
from ctxtool.measure.tokens import request_total, token_count
from ctxtool.session.discover import SessionPath
from ctxtool.session.read import (
    NOT_A_SESSION_FIX,
    BrokenLine,
    Event,
    Replayed,
    check_document,
    copy_line_counts,
    iter_file_lines,
    line_views,
    loads_line,
    parse_document,
    sniff,
)
from ctxtool.session.schema import EMPTY_RESPONSE_NUDGE_PREFIX, TOKEN_KEYS
from ctxtool.session.stamp import MESSAGE_COLUMNS, TOOL_COLUMNS
from ctxtool.session.utf8 import invalid_utf8, read_as_node

PREVIEW_CHARS = 80
# A preview is never cut inside a long token (a key, a token, a hash): it would show part of a secret that
# redaction can no longer recognise. The token is kept whole, up to this many characters more.
_TOKEN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=.:@"
_TOKEN_MAX_EXTRA = 240
# Files above this size are streamed line by line instead of read whole (memory stays bounded).
STREAM_MIN_BYTES = 64 * 1024 * 1024
_FINGERPRINT_BYTES = 4096

# Markers the interactive UI records as `info` messages when it compresses (spec §12.1).
_COMPRESSED_INFO = re.compile(
    r"^(Context compressed from \d+% to \d+%\."
    r"|IMPORTANT: .*compressed context will be sent for future messages)"
)
# What the history Gemini CLI rebuilds leaves out (``_ignored``); no prompt starts with these either.
_IGNORED_PREFIXES = ("/", "?", "<session_context>", "<hook_context>")
_NOT_PROMPT_PREFIXES = (*_IGNORED_PREFIXES, "<state_snapshot>", EMPTY_RESPONSE_NUDGE_PREFIX)


class FileColumns(msgspec.Struct):
    """Everything the frames need from one file. ``error`` set means the file could not be read."""

    path: str
    group_key: str
    project: str
    project_dir: str
    parent_ref: str | None
    error: str | None = None
    era: str = ""
    size: int = 0
    session_id: str | None = None
    project_hash: str | None = None
    kind: str = "main"
    start_time: str | None = None
    last_updated: str | None = None
    summary: str | None = None
    derived_from: str | None = None  # the sessionId of the session ctxtool compacted into this one
    compacted_at: str | None = None  # when ctxtool last compacted this file itself (compact --in-place)
    lines: int = 0
    blank_lines: int = 0
    broken_lines: int = 0
    first_broken_line: int | None = None
    first_overlong_line: int | None = None  # the first line over MAX_RECORD_BYTES (counted broken, not read)
    # Lines holding bytes that are not UTF-8: read as Gemini CLI (Node) reads them, with U+FFFD, and counted.
    invalid_utf8_lines: int = 0
    first_invalid_utf8_line: int | None = None
    unknown_records: int = 0
    rewinds: int = 0
    checkpoints: int = 0
    live_messages: int = 0
    # One row per billed message (MESSAGE_COLUMNS) and per tool call (TOOL_COLUMNS), as JSON documents of
    # columns, a chunk of at most CHUNK_ROWS rows each (see _assemble).
    messages_cols: list[bytes] = msgspec.field(default_factory=list)
    tools_cols: list[bytes] = msgspec.field(default_factory=list)
    n_messages: int = 0
    n_tools: int = 0
    # For a JSONL file that ended on a complete line: where reading can resume when it grows, the live
    # history's order, and fingerprints of its first and last bytes before that point.
    resume_offset: int | None = None
    live_order: list[str] | None = None
    head_hash: str | None = None
    tail_hash: str | None = None
    resumed: bool = False


def message_text(content: Any) -> str:
    """The text a user typed or a model wrote: a string, or the non-thought ``text`` parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought"):
                out.append(part["text"])
        return "".join(out)
    return ""


def _has_media(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(p, dict) and ("inlineData" in p or "fileData" in p) for p in content
    )


def classify_user(content: Any) -> tuple[bool, bool, bool]:
    """(is_prompt, is_command, is_snapshot) for a ``user`` message.

    A prompt is what a person sent: non-empty text (or an attached file) that is not a ``/`` or ``?``
    command and not a ``<session_context>``, ``<hook_context>`` or ``<state_snapshot>`` block, nor
    Gemini CLI's empty-response nudge (``EMPTY_RESPONSE_NUDGE_PREFIX``). Synthetic user turns made only
    of functionResponse parts (written since v0.44) are not prompts."""
    return _classify_text(message_text(content), content)


def _classify_text(text: str, content: Any) -> tuple[bool, bool, bool]:
    text = text.strip()
    if not text:
        return _has_media(content), False, False
    if text.startswith(("/", "?")):
        return False, True, False
    if text.startswith("<state_snapshot>"):
        return False, False, True
    return not text.startswith(_NOT_PROMPT_PREFIXES), False, False


class TurnCounts(msgspec.Struct, frozen=True):
    """What ``ctxtool stats`` counts of some messages: its turns (the rows ``--by turn`` lists), requests,
    typed prompts and tool calls."""

    turns: int = 0
    requests: int = 0
    prompts: int = 0
    tool_calls: int = 0


def turn_counts(
    billed: Iterable[Mapping[str, Any]], copies: Container[str] = (), within: Container[str] | None = None
) -> TurnCounts:
    """``stats``' counts of the messages of ``billed`` (a session's billed records, in order) whose id is in
    ``within`` (all when None), without polars: the rule of ``ctxtool.frames.turns.turn_count``.

    Each prompt (never one of ``copies``, the messages first seen in a checkpoint) starts a turn; a message
    belongs to the turn of the last prompt before it; turn 0 counts when it holds a request or compression."""
    turn = 0
    turns: set[int] = set()
    requests = prompts = calls = 0
    for message in billed:
        mtype, mid = message.get("type"), message.get("id")
        prompt = mtype == "user" and mid not in copies and classify_user(message.get("content"))[0]
        turn += prompt
        if within is not None and mid not in within:
            continue
        request = mtype == "gemini" and isinstance(message.get("tokens"), dict)
        compression = mtype == "info" and _COMPRESSED_INFO.match(message_text(message.get("content")))
        if turn > 0 or request or compression:
            turns.add(turn)
        prompts += prompt
        requests += request
        tool_calls = message.get("toolCalls")
        calls += len(tool_calls) if isinstance(tool_calls, list) else 0
    return TurnCounts(len(turns), requests, prompts, calls)


# Typed fields: the decoder checks them in C, so the hot loop below need not. A record whose fields do not
# fit (a fork's odd types) fails validation and goes through _lenient, which coerces it to these types.
# gc=False: these structs hold only scalars, raw bytes and each other, never a cycle, so the garbage
# collector need not track the tens of thousands a scan makes (msgspec's documented option).
class _Call(msgspec.Struct, gc=False):
    id: str | None = None
    name: str | None = None
    status: str | None = None
    timestamp: str | None = None
    result: msgspec.Raw = msgspec.Raw(b"null")
    args: msgspec.Raw = msgspec.Raw(b"null")


class _Tokens(msgspec.Struct, gc=False):
    input: int | None = None
    output: int | None = None
    cached: int | None = None
    thoughts: int | None = None
    tool: int | None = None
    total: int | None = None


class _Patch(msgspec.Struct, gc=False):
    """A ``$set`` record's patch; a ``_Record`` has these fields too."""

    messages: list[_Record] | msgspec.UnsetType | None = msgspec.UNSET
    sessionId: Any = msgspec.UNSET
    projectHash: Any = msgspec.UNSET
    startTime: Any = msgspec.UNSET
    lastUpdated: Any = msgspec.UNSET
    kind: Any = msgspec.UNSET
    summary: Any = msgspec.UNSET
    derivedFrom: Any = msgspec.UNSET
    ctxtoolCompaction: Any = msgspec.UNSET


class _Record(_Patch, gc=False):
    """Any line of a session file (or a whole legacy document): only the fields reports read."""

    id: Any = msgspec.UNSET
    type: str | None = None
    timestamp: str | None = None
    content: msgspec.Raw = msgspec.Raw(b"null")
    model: str | None = None
    tokens: _Tokens | None = None
    toolCalls: list[_Call] | None = None
    set_: Any = msgspec.field(default=msgspec.UNSET, name="$set")
    rewind: Any = msgspec.field(default=msgspec.UNSET, name="$rewindTo")


# ``derivedFrom``: ctxtool's mark on a session it wrote from another (the original's id);
# ``ctxtoolCompaction`` its mark on a session it compacted in place (``{"at": …}``, merged from the ``$set``
# it appends); see compact.py.
_META_FIELDS = tuple(name for name in _Patch.__struct_fields__ if name != "messages")
# The metadata kept as text, by key: the ``FileColumns`` field each is kept in (the key in snake case).
_META_TEXT = {
    key: re.sub("([A-Z])", r"_\1", key).lower()
    for key in ("sessionId", "projectHash", "startTime", "lastUpdated", "summary", "derivedFrom")
}
_decode_record = msgspec.json.Decoder(_Record).decode
_decode_any = msgspec.json.decode
# Rows per encoded chunk: a frame builder decodes a chunk at a time, so its Python objects stay few.
CHUNK_ROWS = 20_000
_encode = msgspec.json.Encoder().encode
# The columns of one chunk ``_assemble`` wrote.
decode_columns = msgspec.json.Decoder(list[list[Any]]).decode

# A message as the fold carries it: its row (without the live flag) and its tool-call rows.
_Row = tuple[tuple[Any, ...], list[tuple[Any, ...]]]
_INPUT = 13  # index of `input` in a row without the live flag
_TIME = 2  # index of `timestamp` in a row without the live flag
_IS_PROMPT = 5  # index of `is_prompt` (then `is_command`)
_MODEL = 9  # index of `model`
_CALLS = 11  # index of `tool_calls` (then `tool_errors`)
# Where the per-message estimates sit in a row without the live flag.
_EST = _INPUT + len(TOKEN_KEYS)
# A field that is JSON null (or absent): ``raw == _NULL`` compares in C, half the cost of a function.
_NULL = msgspec.Raw(b"null")


def _lenient(obj: Any) -> _Record:
    """Build a record from a generically decoded object, keeping what fits and dropping what cannot."""
    if not isinstance(obj, dict):
        return _Record()
    calls = obj.get("toolCalls")
    msgs = obj.get("messages")
    return _Record(
        id=obj.get("id", msgspec.UNSET),
        type=_str(obj.get("type")),
        timestamp=_str(obj.get("timestamp")),
        content=msgspec.Raw(orjson.dumps(obj.get("content"))),
        model=_str(obj.get("model")),
        tokens=_Tokens(**{k: token_count(v) for k, v in tokens.items() if k in TOKEN_KEYS})
        if isinstance(tokens := obj.get("tokens"), dict)
        else None,
        toolCalls=[
            _Call(
                id=_str(c.get("id")),
                name=_str(c.get("name")),
                status=_str(c.get("status")),
                timestamp=_str(c.get("timestamp")),
                result=msgspec.Raw(orjson.dumps(c.get("result"))),
                args=msgspec.Raw(orjson.dumps(c.get("args"))),
            )
            for c in calls
            if isinstance(c, dict)
        ]
        if isinstance(calls, list)
        else None,
        messages=[_lenient(m) for m in msgs if isinstance(m, dict)]
        if isinstance(msgs, list)
        else msgspec.UNSET,
        **{k: obj[k] for k in _META_FIELDS if k in obj},
        set_=obj.get("$set", msgspec.UNSET),
        rewind=obj.get("$rewindTo", msgspec.UNSET),
    )


def _decode_line(line: bytes | memoryview) -> _Record | None:
    """A record, or None when the line is JSON but not an object; BrokenLine when it is not JSON.

    The typed decoder is only a faster way to the same record: whenever it refuses a line, the full reader's
    ``loads_like_node`` decides, so what counts as a broken line is defined once."""
    try:
        return _decode_record(line)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # ValidationError included
        pass
    obj = loads_line(line)
    return _lenient(obj) if isinstance(obj, dict) else None


def _meta(rec: Any) -> dict[str, Any]:
    return {k: v for k in _META_FIELDS if (v := getattr(rec, k)) is not msgspec.UNSET}


def _carry_tokens(previous: _Row, new: _Row) -> _Row | None:
    """``read._carry_tokens_dict`` on report rows; a message also keeps the prompt/command flags of its first
    record: a checkpoint that re-records a copy (say on resume) does not make it a prompt again."""
    row, calls = new
    old_row, old_calls = previous
    first_time = old_row[_TIME]
    time = row[_TIME] if first_time is None else first_time
    flags = old_row[_IS_PROMPT : _IS_PROMPT + 2]
    head = (*row[:_TIME], time, *row[_TIME + 1 : _IS_PROMPT], *flags)
    if row[_INPUT] is not None or old_row[_INPUT] is None:
        if time == row[_TIME] and flags == row[_IS_PROMPT : _IS_PROMPT + 2]:
            return None
        return (*head, *row[_IS_PROMPT + 2 :]), calls
    model = row[_MODEL] if row[_MODEL] is not None else old_row[_MODEL]
    if not calls and old_calls:
        calls, counts = old_calls, old_row[_CALLS : _CALLS + 2]
    else:
        counts = row[_CALLS : _CALLS + 2]
    return (*head, *row[_IS_PROMPT + 2 : _MODEL], model, row[_MODEL + 1], *counts, *old_row[_INPUT:]), calls


def _as_copy(message: _Row) -> _Row:
    """A message first seen in a ``$set.messages`` checkpoint (see ``Replayed.feed``): not a prompt, not a
    command; it keeps its preview, so a turn whose typed prompt left the history is still named."""
    row, calls = message
    if not (row[_IS_PROMPT] or row[_IS_PROMPT + 1]):
        return message
    return (*row[:_IS_PROMPT], False, False, *row[_IS_PROMPT + 2 :]), calls


def _row(rec: _Record, history: tuple[int, int, int, int, int]) -> _Row:
    """The report row of one message record (every column but ``live``) and its tool-call rows.

    ``history`` ends the row: the estimates of the history before the message (prompts, model, tool I/O)
    and the rewinds and checkpoints seen, which the caller knows (built whole, not copied to append them)."""
    mid = rec.id if rec.id.__class__ is str else None
    mtype = rec.type or "unknown"
    raw = rec.content
    content: Any = None
    if raw != _NULL:
        try:
            content = _decode_any(raw)
        except (msgspec.DecodeError, RecursionError):  # a number out of range: not JSON to the full reader
            raise BrokenLine from None
    text = content if content.__class__ is str else message_text(content)
    is_prompt = is_command = is_snapshot = compression = False
    preview = None
    if mtype == "user":
        is_prompt, is_command, is_snapshot = _classify_text(text, content)
        if is_prompt:
            preview = clip_preview(text, PREVIEW_CHARS)
    elif mtype == "info":
        compression = _COMPRESSED_INFO.match(text) is not None
    n_errors = call_chars = result_chars = 0
    tool_rows: list[tuple[Any, ...]] = []
    if rec.toolCalls:
        # One pass makes the tool rows and measures the calls for _estimate (see its docstring).
        for call in rec.toolCalls:
            if call.status == "error":
                n_errors += 1
            name_len = len(call.name or "")
            result, args = call.result, call.args
            size = 0
            if result != _NULL:
                size = len(result)
                result_chars += name_len + size + 12
            no_args = args == _NULL
            call_chars += 40 + len(call.id or "") + name_len + (0 if no_args else len(args))
            target = None if no_args else _target(args)
            tool_rows.append((mid, call.id, call.name, call.status, call.timestamp, size, target))
    ignored = mtype == "user" and (is_command or _ignored(text))
    estimates = _estimate(mtype, content, text, ignored, bool(rec.toolCalls), call_chars, result_chars)
    t = rec.tokens
    if mtype == "gemini" and t is not None:
        prompt, output, thoughts, tool = t.input or 0, t.output or 0, t.thoughts or 0, t.tool or 0
        # ctxtool.measure.tokens: one accounting of a request's total
        total = request_total(t.total, prompt, output, thoughts, tool)
        counts: tuple[Any, ...] = (prompt, output, t.cached or 0, thoughts, tool, total)
    else:
        counts = (None, None, None, None, None, None)
    row = (
        mid,
        mtype,
        rec.timestamp,
        len(text),
        0 if content is None else len(raw),
        is_prompt,
        is_command,
        is_snapshot,
        compression,
        rec.model,
        preview,
        len(tool_rows),
        n_errors,
        *counts,
        *estimates,
        *history,
    )
    return row, tool_rows


def _ignored(text: str) -> bool:
    """``is_ignored_user_content`` (sessionUtils.ts): a user message ``convertSessionToClientHistory``
    leaves out of the history (commands, the environment block, hook context, empty text)."""
    if not text or text.isspace():
        return True
    head = text[:64].lstrip() or text.lstrip()[:64]  # without copying a long text
    return head.startswith(_IGNORED_PREFIXES)


def _estimate(
    mtype: str, content: Any, text: str, ignored: bool, has_calls: bool, call_chars: int, result_chars: int
) -> tuple[int, int, int]:
    """(prompts, model, tool I/O): what this message adds to the history Gemini CLI rebuilds from the
    session (``convert_session_to_client_history``, thoughts stripped as ``strip_thoughts`` does), each part
    by Gemini CLI's estimator (``ctxtool.measure.estimator.estimate_token_count``). Tool results are never
    decoded here (speed): a function response is estimated from its stored JSON length, the estimator's own
    formula for a ``functionResponse``. ``call_chars`` and ``result_chars`` measure the function calls
    (counted unless the record holds them in its parts, as a modern one does) and responses of ``toolCalls``:
    a call is ``{"functionCall":{"id":…,"name":…,"args":…}}``, 40 characters around its id, name and args; a
    response is its name and ``{"output": …}``, 12 characters around the stored result (4 a token)."""
    if mtype not in ("user", "gemini") or (content is None and not has_calls):
        return 0, 0, 0
    if isinstance(content, str):  # most messages (48,300 of 60,440 in the bench corpus): no parts to sort
        if mtype == "user":
            return (0, 0, 0) if ignored else (estimate_text(content), 0, 0)
        return 0, estimate_text(content) if content else 0, (call_chars + result_chars) // 4
    parts: list[Any] = (
        content if isinstance(content, list) else [content] if isinstance(content, dict) else []
    )
    if mtype == "user":
        if ignored and not _has_media(content):
            return 0, 0, 0
        if all(isinstance(p, str) or (isinstance(p, dict) and p.keys() <= {"text"}) for p in parts):
            return estimate_text(text), 0, 0  # text parts only: their estimate is the joined text's
        io = [p for p in parts if isinstance(p, dict) and "functionResponse" in p]
        if not io:
            return estimate_token_count(parts), 0, 0
        rest = [p for p in parts if not (isinstance(p, dict) and "functionResponse" in p)]
        return estimate_token_count(rest), 0, estimate_token_count(io)
    called = [p for p in parts if isinstance(p, dict) and p.get("functionCall")]
    model = estimate_text(text) if text else 0  # ``text``: the non-thought text parts, joined
    if called:
        return 0, model, result_chars // 4 + estimate_token_count(called)
    return 0, model, (call_chars + result_chars) // 4


class _Args(msgspec.Struct, gc=False):
    """The arguments of a tool call that name what it was about; the rest (file contents) is skipped."""

    file_path: Any = None
    absolute_path: Any = None
    path: Any = None
    command: Any = None
    dir_path: Any = None
    pattern: Any = None
    url: Any = None
    query: Any = None


_TARGET_KEYS = _Args.__struct_fields__  # in the order they are looked for
_decode_args = msgspec.json.Decoder(_Args).decode


def _target(args: msgspec.Raw) -> str | None:
    """What a tool call was about (a file, a command, a pattern), from its args (not null)."""
    try:
        value = _decode_args(args)
    except (msgspec.DecodeError, UnicodeDecodeError):  # ValidationError included: args not an object
        return None
    for key in _TARGET_KEYS:
        found = getattr(value, key)
        if isinstance(found, str) and found:
            if len(found) <= PREVIEW_CHARS:  # a path or a short command (most targets): nothing to cut
                return found if found.isprintable() else " ".join(found.split())
            return clip_preview(found, PREVIEW_CHARS)
        if isinstance(found, list) and found and isinstance(found[0], str):
            return clip_preview(", ".join(x for x in found if isinstance(x, str)), PREVIEW_CHARS)
    return None


class _LiveSums(dict[str, _Row]):
    """The live history (``Replayed.live``) that also keeps the sum of its messages' estimates."""

    def __init__(self) -> None:
        super().__init__()
        self.sums = [0, 0, 0]

    def __setitem__(self, key: str, value: _Row) -> None:
        old = self.get(key)
        if old is not None:
            self._add(old[0], -1)
        self._add(value[0], 1)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self._add(self[key][0], -1)
        super().__delitem__(key)

    def clear(self) -> None:
        self.sums = [0, 0, 0]
        super().clear()

    def _add(self, row: tuple[Any, ...], sign: int) -> None:
        sums = self.sums
        sums[0] += sign * row[_EST]
        sums[1] += sign * row[_EST + 1]
        sums[2] += sign * row[_EST + 2]


def _history_classifier(r: Replayed[_Row]) -> Any:
    """The classifier of the lines fed to ``r``: each message is stamped with the history (``r.live``) before
    it when it was recorded, a checkpoint's messages with the history before each of them."""
    live = r.live
    assert isinstance(live, _LiveSums)

    def classify(line: bytes | memoryview) -> Event:
        rec = _decode_line(line)
        if rec is None:
            return "unknown", None, None
        if rec.rewind is not msgspec.UNSET:
            return "rewind", rec.rewind, None
        if rec.set_ is not msgspec.UNSET:
            patch = rec.set_
            if not isinstance(patch, dict):
                return "set", {}, None
            try:
                typed = msgspec.convert(patch, _Patch)
            except msgspec.ValidationError:
                typed = _lenient(patch)
            messages = typed.messages
            pairs = _pairs(messages, r.rewinds, r.checkpoints + 1) if isinstance(messages, list) else None
            return "set", _meta(typed), pairs
        mid = rec.id
        if isinstance(mid, str):
            prompts, model, io = live.sums
            old = live.get(mid)
            if old is not None:  # an update of a recorded message: the history before it
                old_row = old[0]
                prompts -= old_row[_EST]
                model -= old_row[_EST + 1]
                io -= old_row[_EST + 2]
            return "message", mid, _row(rec, (prompts, model, io, r.rewinds, r.checkpoints))
        if rec.sessionId is not msgspec.UNSET:
            messages = rec.messages
            pairs = _pairs(messages, r.rewinds, r.checkpoints) if isinstance(messages, list) else None
            return "meta", _meta(rec), pairs
        return "unknown", None, None

    return classify


def _pairs(messages: list[_Record], rewinds: int, checkpoints: int) -> list[tuple[str, _Row]]:
    """The messages of a whole history that have an id (those a replay keeps), by id (see ``_cumulative``)."""
    kept = [m for m in messages if isinstance(m.id, str)]
    return list(zip([m.id for m in kept], _cumulative(kept, rewinds, checkpoints), strict=True))


def _cumulative(messages: list[_Record], rewinds: int, checkpoints: int) -> list[_Row]:
    """The rows of a whole history (a checkpoint, a legacy document): each with the estimates before it."""
    prompts = model = io = 0
    out = []
    for rec in messages:
        message = _row(rec, (prompts, model, io, rewinds, checkpoints))
        row = message[0]
        prompts += row[_EST]
        model += row[_EST + 1]
        io += row[_EST + 2]
        out.append(message)
    return out


def _assemble(out: FileColumns, billed: list[_Row], live_ids: set[str] | None) -> None:
    """Encode the rows column by column as JSON (msgspec): several times quicker to write than CSV, and
    the parent turns columns into polars series without a Python object per cell. Values keep their types;
    a row's ``live`` flag goes in as the fourth column."""
    rows = [r for r, _ in billed]
    calls = [call for _, calls in billed if calls for call in calls]
    out.messages_cols = []
    for start in range(0, len(rows), CHUNK_ROWS):
        chunk = rows[start : start + CHUNK_ROWS]
        live = [True] * len(chunk) if live_ids is None else [r[0] in live_ids for r in chunk]
        cols = list(zip(*chunk, strict=True))
        out.messages_cols.append(_encode([*cols[:3], live, *cols[3:]]))
    out.tools_cols = [
        _encode(list(zip(*calls[start : start + CHUNK_ROWS], strict=True)))
        for start in range(0, len(calls), CHUNK_ROWS)
    ]
    out.n_messages = len(rows)
    out.n_tools = len(calls)


def decode_rows(chunks: list[bytes]) -> list[tuple[Any, ...]]:
    """The rows ``_assemble`` wrote, as tuples (values with their types)."""
    return [row for chunk in chunks for row in zip(*decode_columns(chunk), strict=True)]


def message_rows(fc: FileColumns) -> list[dict[str, Any]]:
    """A file's message rows as dicts (for inspection and tests)."""
    return [dict(zip(MESSAGE_COLUMNS, r, strict=True)) for r in decode_rows(fc.messages_cols)]


def tool_rows(fc: FileColumns) -> list[dict[str, Any]]:
    return [dict(zip(TOOL_COLUMNS, r, strict=True)) for r in decode_rows(fc.tools_cols)]


def _as_read(out: FileColumns, data: bytes, first_line: int = 1) -> bytes:
    """``data`` as Gemini CLI reads it (``read_as_node``), its lines that are not UTF-8 counted in ``out``."""
    count, first = invalid_utf8(data, first_line)
    if count:
        out.invalid_utf8_lines += count
        if out.first_invalid_utf8_line is None:
            out.first_invalid_utf8_line = first
    return read_as_node(data, count)


def columns_from_bytes(data: bytes, sp: SessionPath) -> FileColumns:
    """Read one file's bytes into columns. Raises SessionFormatError like the full reader."""
    p = Path(sp.path)
    out = _empty(sp, len(data))
    bom = data.startswith(codecs.BOM_UTF8)  # not written by Gemini CLI, but a hand-edited file may carry one
    data = data.removeprefix(codecs.BOM_UTF8)
    whole_error = None
    shape = sniff(data, p)
    sample, data = data, _as_read(out, data)
    if shape == "document":
        doc: _Record | None = None
        try:
            doc = _decode_record(data)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # ValidationError included
            # Odd field types, or what the typed decoder refuses: the full reader's parse decides.
            obj, whole_error = parse_document(data, p)
            if whole_error is None:
                doc = _lenient(obj)
        else:
            if doc.messages is msgspec.UNSET and doc.sessionId is msgspec.UNSET:
                check_document({}, p)
        if doc is not None:
            _from_document(out, doc, p)
            return out
    r: Replayed[_Row] = Replayed(live=_LiveSums())
    r.feed(line_views(data), _history_classifier(r), _carry_tokens, _as_copy)
    r.finish(p, whole_error, sample)
    # Resumable when it ended on a complete line and was read as its bytes are (offsets then hold).
    whole = data if data is sample and data.endswith(b"\n") and not bom else None
    _from_replay(out, r, whole)
    return out


def columns_from_file(sp: SessionPath, resume: FileColumns | None = None) -> FileColumns:
    """Read one file into columns: whole when small, streamed when large, resumed when it only grew (still
    starts and, up to the end of ``resume``, an earlier result, ends with the same bytes). Raises
    SessionFormatError."""
    p = Path(sp.path)
    with open(p, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if resume is not None and resume.resume_offset is not None and size > resume.resume_offset:
            resumed = _resume(fh, sp, resume, size)
            if resumed is not None:
                return resumed
            fh.seek(0)
        if size < STREAM_MIN_BYTES:
            return columns_from_bytes(fh.read(), sp)
        head = fh.read(1 << 20)
        start = len(codecs.BOM_UTF8) if head.startswith(codecs.BOM_UTF8) else 0
        head = head[start:]
        if sniff(head + (b"" if b"\n" in head else fh.read()), p) == "document":
            _check_memory(p, size)
            fh.seek(0)
            return columns_from_bytes(fh.read(), sp)
        fh.seek(start)
        out = _empty(sp, size)
        r: Replayed[_Row] = Replayed(live=_LiveSums())

        def counted(lines: Iterator[bytes]) -> Iterator[bytes]:
            for number, line in enumerate(lines, 1):
                yield line if line.isascii() else _as_read(out, line, number)

        r.feed(counted(iter_file_lines(fh)), _history_classifier(r), _carry_tokens, _as_copy)
        r.finish(p, None, head)
        _from_replay(out, r, None)
        return out


def _resume(fh: BinaryIO, sp: SessionPath, old: FileColumns, size: int) -> FileColumns | None:
    offset = old.resume_offset
    assert offset is not None
    head = fh.read(min(offset, _FINGERPRINT_BYTES))
    fh.seek(max(0, offset - _FINGERPRINT_BYTES))
    tail = fh.read(min(offset, _FINGERPRINT_BYTES))
    if _digest(head) != old.head_hash or _digest(tail) != old.tail_hash:
        return None  # rewritten, not appended to (e.g. a legacy file resumed as a new .jsonl)
    r = _replayed_from(old)
    fh.seek(offset)
    rest = fh.read()
    out = _empty(sp, size)
    out.invalid_utf8_lines, out.first_invalid_utf8_line = old.invalid_utf8_lines, old.first_invalid_utf8_line
    r.feed(line_views(_as_read(out, rest, r.next_line)), _history_classifier(r), _carry_tokens, _as_copy)
    if rest.endswith(b"\n"):
        out.resume_offset = size
        fh.seek(0)
        out.head_hash = _digest(fh.read(min(size, _FINGERPRINT_BYTES)))
        fh.seek(size - min(size, _FINGERPRINT_BYTES))
        out.tail_hash = _digest(fh.read())
    _from_replay(out, r, None, keep_resume=out.resume_offset is not None)
    out.resumed = True
    return out


def _digest(data: bytes) -> str:
    return blake2b(data, digest_size=16).hexdigest()


def _check_memory(p: Path, size: int) -> None:
    """Refuse a whole-document read that the machine's free memory cannot hold, with a clear message."""
    available = _available_memory()
    if available is not None and size * 2 > available:
        raise SessionFormatError(
            p,
            f"is a single {size / 1e9:.1f} GB JSON document and only {available / 1e9:.1f} GB of memory "
            "is free to read it",
            "Free memory, or let Gemini CLI resume it once so that it is rewritten as JSONL (streamed)",
        )


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _empty(sp: SessionPath, size: int) -> FileColumns:
    return FileColumns(str(sp.path), sp.group_key, sp.project, sp.project_dir, sp.parent_ref, size=size)


def _from_document(out: FileColumns, doc: _Record, p: Path) -> None:
    if doc.messages is not msgspec.UNSET and not isinstance(doc.messages, list):
        raise SessionFormatError(p, "has a 'messages' field that is not a list", NOT_A_SESSION_FIX)
    _set_meta(out, _meta(doc), "json", lines=1)
    messages = doc.messages if isinstance(doc.messages, list) else []
    billed = _cumulative(messages, 0, 0)
    out.live_messages = len(billed)
    _assemble(out, billed, None)


def _from_replay(
    out: FileColumns, r: Replayed[_Row], whole: bytes | None, *, keep_resume: bool = False
) -> None:
    _set_meta(out, r.metadata, "jsonl", lines=r.lines)
    copy_line_counts(r, out)
    out.live_messages = len(r.live)
    out.live_order = list(r.live)
    if whole is not None:  # ended on a complete line: reading can resume here when the file grows
        out.resume_offset = len(whole)
        out.head_hash = _digest(whole[:_FINGERPRINT_BYTES])
        out.tail_hash = _digest(whole[-_FINGERPRINT_BYTES:])
    elif not keep_resume:
        out.resume_offset = None
    _assemble(out, list(r.billed.values()), set(r.live))


def _replayed_from(old: FileColumns) -> Replayed[_Row]:
    """Rebuild the replay state an earlier result ended with, to feed it the lines appended since."""
    r: Replayed[_Row] = Replayed(live=_LiveSums())
    calls: dict[str, list[tuple[Any, ...]]] = {}
    for row in decode_rows(old.tools_cols):
        calls.setdefault(row[0], []).append(row)
    live_col = MESSAGE_COLUMNS.index("live")
    for row in decode_rows(old.messages_cols):
        mid = row[0]
        r.billed[mid] = (row[:live_col] + row[live_col + 1 :], calls.get(mid, []))
    for mid in old.live_order or []:
        r.live[mid] = r.billed[mid]
    r.metadata = {
        key: value for key, field in _META_TEXT.items() if (value := getattr(old, field)) is not None
    }
    r.metadata["kind"] = old.kind
    if old.compacted_at is not None:
        r.metadata["ctxtoolCompaction"] = {"at": old.compacted_at}
    copy_line_counts(old, r)
    r.records, r.saw_session = max(old.lines - old.broken_lines, 1), True
    r.next_line = old.lines + old.blank_lines + 1
    return r


def _set_meta(out: FileColumns, meta: dict[str, Any], era: str, *, lines: int) -> None:
    out.era, out.lines = era, lines
    for key, field in _META_TEXT.items():
        setattr(out, field, _str(meta.get(key)))
    kind = meta.get("kind")
    out.kind = kind if isinstance(kind, str) else "main"
    mark = meta.get("ctxtoolCompaction")
    out.compacted_at = _str(mark.get("at")) if isinstance(mark, dict) else None


def clip_preview(text: str, limit: int) -> str:
    """``text`` on one line, cut to about ``limit`` characters with "…", never inside a long token (found
    with ``str.rstrip``/``lstrip``, in C: 0.04 s for the bench corpus's previews, a regex loop 0.07 s)."""
    text = " ".join(text[: limit * 4 + _TOKEN_MAX_EXTRA].split())
    if len(text) <= limit:
        return text
    cut = limit - 1
    if text[cut - 1] in _TOKEN_CHARS and text[cut] in _TOKEN_CHARS:
        after = text[cut : cut + _TOKEN_MAX_EXTRA]
        end = cut + len(after) - len(after.lstrip(_TOKEN_CHARS))
        start = len(text[:cut].rstrip(_TOKEN_CHARS))
        if end - start >= 16:  # a long token: whole (a short word is simply cut)
            cut = end
    return text if cut >= len(text) else text[:cut] + "…"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def extract_file(sp: SessionPath, resume: FileColumns | None = None) -> FileColumns:
    """Worker entry point: read and flatten one file; a bad file comes back with ``error`` set."""
    try:
        return columns_from_file(sp, resume)
    except IsADirectoryError:
        error = f"{sp.path}: is a directory. Pass the directory itself as a PATH to scan it"
    except OSError as exc:
        error = f"{sp.path}: cannot be read ({exc.strerror or exc}). Check that it exists and is readable"
    except SessionFormatError as exc:
        error = str(exc)
    except RecursionError:
        error = f"{sp.path}: is nested too deeply to read. Pass only Gemini CLI session files"
    except MemoryError:
        error = f"{sp.path}: is too large to read into memory. Free memory or use a larger machine"
    return FileColumns(str(sp.path), sp.group_key, sp.project, sp.project_dir, sp.parent_ref, error=error)
