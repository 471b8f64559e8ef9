"""Read one Gemini CLI session file, of any era, into its live history and its billed record.

Owns: sniffing the format from the bytes (never the extension), the JSONL replay rules of Gemini CLI's
``loadConversationRecord`` (packages/core/src/services/chatRecordingService.ts @ 5411f113ca), and two views:

* **live**: the message list Gemini CLI would resume (upserts, ``$set.messages`` checkpoints and
  ``$rewindTo`` applied);
* **billed**: every distinct message ever recorded in the file (the last copy of each id, in order of first
  appearance), including messages a rewind or a checkpoint later dropped: those requests were paid for.

Must not: print, import polars/rich/typer, or guess at anything it cannot read (it raises
``SessionFormatError`` naming the file and the fix)."""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Generic, Literal, TypeVar, cast

import msgspec
import orjson

from ctxtool.common.errors import SessionFormatError
from ctxtool.session.schema import MessageRecord
from ctxtool.session.stamp import MAX_RECORD_BYTES
from ctxtool.session.utf8 import read_as_node

Era = Literal["json", "jsonl"]

NOT_A_SESSION_FIX = "Pass only Gemini CLI session files (~/.gemini/tmp/<project>/chats/session-*.json[l])"
_NOT_SPACE = re.compile(rb"\S")  # a byte that bytes.strip() keeps


class SessionFile(msgspec.Struct):
    """One file read. ``messages`` is the live view, ``billed`` the billed view (see module docstring)."""

    path: Path
    era: Era
    metadata: dict[str, Any]
    messages: list[MessageRecord]
    billed: list[MessageRecord]
    size: int = 0
    lines: int = 0
    blank_lines: int = 0
    broken_lines: int = 0
    first_broken_line: int | None = None
    first_overlong_line: int | None = None  # the first line over MAX_RECORD_BYTES (counted broken, not read)
    unknown_records: int = 0
    rewinds: int = 0
    checkpoints: int = 0
    # Ids of the messages first seen inside a ``$set.messages`` checkpoint: copies Gemini CLI made of history
    # it rebuilt (see ``Replayed.feed``), never a prompt typed then, as ``stats`` counts them.
    copies: frozenset[str] = frozenset()

    @property
    def session_id(self) -> str | None:
        value = self.metadata.get("sessionId")
        return value if isinstance(value, str) else None

    @property
    def kind(self) -> str:
        value = self.metadata.get("kind")
        return value if isinstance(value, str) else "main"


def loads_like_node(data: bytes | memoryview) -> Any:
    """``JSON.parse`` of bytes Node read as UTF-8: what decides whether a record is JSON, for every reader.

    Gemini CLI reads session files with ``fs.readFile(path, 'utf8')``, which replaces undecodable bytes;
    orjson rejects them, so a failed parse is retried on the bytes as Node reads them (``read_as_node``).
    Raises orjson.JSONDecodeError (also past 1024 levels of nesting)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        whole = bytes(data)
        as_read = read_as_node(whole)
        if as_read is whole:
            raise
        return orjson.loads(as_read)


def read_session(path: Path | str) -> SessionFile:
    """Read ``path``. Raises SessionFormatError for anything that is not a readable session."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except IsADirectoryError:
        raise SessionFormatError(
            p, "is a directory", "Pass the directory itself as a PATH to scan it"
        ) from None
    except OSError as exc:
        raise SessionFormatError(
            p, f"cannot be read ({exc.strerror or exc})", "Check that the file exists and is readable"
        ) from None
    return parse_session_bytes(data, p)


def parse_session_bytes(data: bytes, path: Path | str = "<bytes>") -> SessionFile:
    """Parse the bytes of a session file; ``path`` is only used in messages and the result."""
    p = Path(path)
    data = data.removeprefix(codecs.BOM_UTF8)
    shape = sniff(data, p)
    sample, data = data, read_as_node(data)
    whole_error = None
    if shape == "document":
        doc, whole_error = parse_document(data, p)
        if whole_error is None:
            return _from_document(p, doc, len(sample))
    copies: set[str] = set()

    def copied(message: MessageRecord) -> MessageRecord:
        mid = message.get("id")
        if isinstance(mid, str):
            copies.add(mid)
        return message

    r: Replayed[MessageRecord] = Replayed()
    r.feed(split_lines(data), lambda line: classify_record(loads_line(line)), _carry_tokens_dict, copied)
    r.finish(p, whole_error, sample)
    live, billed = list(r.live.values()), list(r.billed.values())
    session = SessionFile(p, "jsonl", r.metadata, live, billed, size=len(sample), copies=frozenset(copies))
    copy_line_counts(r, session)
    return session


def sniff(data: bytes, p: Path) -> Literal["document", "lines"]:
    """One JSON document or JSON lines? Decided from the content, never the extension.

    Lines when the first line is a complete JSON object, unless that one line is the whole file and holds
    ``messages`` (a compact legacy document); otherwise a document. Only the first line is parsed here, so a
    large file is never parsed twice. A "document" whose parse fails is read as lines by the caller (a
    truncated document then reports itself as such)."""
    # Not data.strip(): that copies a whole file ending in a newline. A newline followed only by blank space
    # ends the one line.
    body = data.lstrip()
    if not body:
        raise SessionFormatError(p, "is empty", "Delete it, or pass only files Gemini CLI finished writing")
    if body[:1] not in (b"{", b"["):
        raise _not_json(p, data)
    newline = body.find(b"\n")
    if newline >= 0 and _NOT_SPACE.search(body, newline) is None:
        newline = -1
    try:
        head = loads_like_node(body.rstrip() if newline < 0 else body[:newline])
    except orjson.JSONDecodeError:
        return "lines" if newline < 0 else "document"
    if isinstance(head, dict) and (newline >= 0 or head.get("messages") is None):
        return "lines"
    return "document"


def parse_document(data: bytes, p: Path) -> tuple[Any, str | None]:
    """(the session, None) when ``data`` is one JSON document, parsed as Node would and checked to be a
    session; else (None, the parse error), and the caller reads ``data`` as lines."""
    try:
        doc = loads_like_node(data)
    except orjson.JSONDecodeError as exc:
        return None, str(exc)
    check_document(doc, p)
    return doc, None


def check_document(doc: Any, p: Path) -> None:
    """A parsed whole document must be a session: an object with ``messages`` (a list) or ``sessionId``."""
    if not isinstance(doc, dict):
        raise SessionFormatError(
            p, f"is JSON ({type(doc).__name__}) but not a Gemini CLI session", NOT_A_SESSION_FIX
        )
    if doc.get("messages") is None and "sessionId" not in doc:
        raise SessionFormatError(p, "is JSON but not a Gemini CLI session", NOT_A_SESSION_FIX)
    if not isinstance(doc.get("messages", []), list | None):  # (both readers: the columns' lenient parse too)
        raise SessionFormatError(p, "has a 'messages' field that is not a list", NOT_A_SESSION_FIX)


def _not_json(p: Path, data: bytes) -> SessionFormatError:
    try:
        data[:4096].decode("utf-8")
    except UnicodeDecodeError:
        return SessionFormatError(p, "is not UTF-8 text", NOT_A_SESSION_FIX)
    return SessionFormatError(p, "is not JSON", NOT_A_SESSION_FIX)


def _from_document(p: Path, doc: dict[str, Any], size: int) -> SessionFile:
    messages = [cast(MessageRecord, m) for m in doc.get("messages") or () if isinstance(m, dict)]
    metadata = {k: v for k, v in doc.items() if k != "messages"}
    # A legacy file is rewritten whole on every update, so a rewind leaves no trace: billed == live.
    return SessionFile(p, "json", metadata, messages, list(messages), size=size, lines=1)


# --- the JSONL replay, shared by every representation of a record -----------------------------------

M = TypeVar("M")
Line = TypeVar("Line", bytes, memoryview)  # a line of a JSONL file, copied or viewed in place
# The bytes ``bytes.isspace`` counts as space: a line made only of them is blank.
_SPACE = frozenset(b" \t\n\r\x0b\x0c")

# What one line says, whatever parsed it:
#   ("message", id, message) | ("rewind", target, None) | ("set", metadata, messages | None)
#   | ("meta", metadata, messages | None) | ("unknown", None, None)
# where messages is a list of (id, message) pairs.
Event = tuple[str, Any, Any]

# What a replay counts about a file's lines, kept under these names by every view of a file.
LINE_COUNTS: tuple[str, ...] = ("lines", "blank_lines", "broken_lines", "first_broken_line")
LINE_COUNTS += ("first_overlong_line", "unknown_records", "rewinds", "checkpoints")


class BrokenLine(Exception):
    """A line that is not valid JSON (a half-written last line, a stray edit)."""


def copy_line_counts(source: object, target: object) -> None:
    """Copy ``LINE_COUNTS`` from one view of a file (a replay, a session file, its columns) to another."""
    for name in LINE_COUNTS:
        setattr(target, name, getattr(source, name))


class Replayed(msgspec.Struct, Generic[M]):
    """The state of a JSONL replay; more lines can be fed later (a file Gemini CLI appended to)."""

    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    live: dict[str, M] = msgspec.field(default_factory=dict)
    billed: dict[str, M] = msgspec.field(default_factory=dict)
    lines: int = 0
    blank_lines: int = 0
    broken_lines: int = 0
    first_broken_line: int | None = None
    first_overlong_line: int | None = None
    unknown_records: int = 0
    rewinds: int = 0
    checkpoints: int = 0
    records: int = 0
    saw_session: bool = False
    next_line: int = 1

    def feed(
        self,
        lines: Iterable[Line],
        classify: Callable[[Line], Event],
        carry_tokens: Callable[[M, M], M | None],
        copied: Callable[[M], M] | None = None,
    ) -> None:
        """Apply Gemini CLI's JSONL rules (``loadConversationRecord`` @ 5411f113ca) to more lines.

        * a message is upserted by id: a repeated id replaces the content and keeps the first position;
        * ``$rewindTo`` drops that message and everything after it; an id that is not there drops all;
        * ``$set`` merges metadata, and ``$set.messages`` clears the list and rebuilds it (a checkpoint);
        * any other object with ``sessionId`` is a metadata line (merged; it may repeat);
        * blank and unparseable lines are skipped and counted, as is a line over ``MAX_RECORD_BYTES``.

        ``carry_tokens(previous, new)`` returns ``new`` with what the first record of that id said of the
        request when ``new`` lacks it (else None): the billed view keeps what was paid, when it was paid.

        ``copied(message)`` marks a message first seen inside a checkpoint as a copy Gemini CLI made of
        history it rebuilt, never something the user typed then: Gemini CLI 0.61.0 gives the turns it keeps
        after a compression new ids (chatRecordingService.ts ``updateMessagesFromHistory`` calls
        ``newMessage``), while typed prompts are always appended as message lines (``recordMessage``)."""
        live, billed = self.live, self.billed

        def bill(mid: str, message: M, checkpoint: bool = False) -> None:
            previous = billed.get(mid)
            if previous is not None:
                merged = carry_tokens(previous, message)
                if merged is not None:
                    message = merged
            elif checkpoint and copied is not None:
                message = copied(message)
            billed[mid] = message

        number = self.next_line - 1
        for line in lines:
            number += 1
            if not line or (line[0] in _SPACE and bytes(line).isspace()):
                self.blank_lines += 1
                continue
            self.lines += 1
            try:
                if line.__class__ is _Overlong or len(line) > MAX_RECORD_BYTES:
                    if self.first_overlong_line is None:
                        self.first_overlong_line = number
                    raise BrokenLine
                kind, a, b = classify(line)
            except BrokenLine:
                self.broken_lines += 1
                if self.first_broken_line is None:
                    self.first_broken_line = number
                continue
            self.records += 1
            if kind == "message":
                live[a] = b
                bill(a, b)
                self.saw_session = True
            elif kind == "rewind":
                _rewind(live, a)
                self.rewinds += 1
                self.saw_session = True
            elif kind in ("set", "meta"):
                self.metadata.update(a)
                if b is not None:
                    live.clear()
                    for mid, message in b:
                        live[mid] = message
                        bill(mid, message, kind == "set")
                    if kind == "set":
                        self.checkpoints += 1
                self.saw_session = True
            else:
                self.unknown_records += 1
        self.next_line = number + 1

    def finish(self, p: Path, whole_error: str | None, sample: bytes) -> None:
        """Raise SessionFormatError when the lines held no session at all (``sample``: the file's start)."""
        if self.saw_session:
            return
        if self.records == 0:
            reason = _describe_broken(whole_error, sample)
            fix = NOT_A_SESSION_FIX
            if "truncated" in reason:
                fix = "Re-run when Gemini CLI has finished writing it, or restore it from a backup"
            raise SessionFormatError(p, reason, fix)
        raise SessionFormatError(p, "is JSON but not a Gemini CLI session", NOT_A_SESSION_FIX)


def _rewind(live: dict[str, Any], target: Any) -> None:
    """``$rewindTo``: drop ``target`` and every message after it from ``live``; all when it is not there."""
    keys = list(live)
    try:
        index = keys.index(target)
    except ValueError:
        live.clear()
    else:
        for key in keys[index:]:
            del live[key]


def split_lines(data: bytes) -> list[bytes]:
    """The lines of a JSONL buffer; the newline that ends the last record does not make an empty line."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def line_views(data: bytes) -> Iterator[memoryview]:
    """``split_lines(data)`` as views into ``data``, none copied (copying was 0.03 s of the 0.07 s that
    splitting and decoding the bench corpus's JSONL took)."""
    view = memoryview(data)
    find = data.find
    start = 0
    end = find(b"\n")
    while end >= 0:
        yield view[start:end]
        start = end + 1
        end = find(b"\n", start)
    if start < len(data):
        yield view[start:]


class _Overlong(bytes):
    """What ``iter_file_lines`` yields for a line over ``MAX_RECORD_BYTES``: a mark ``Replayed.feed`` counts
    as a broken line."""


OVERLONG = _Overlong(b"\x00")


def iter_file_lines(
    fh: BinaryIO, chunk_size: int = 16 * 1024 * 1024, max_line: int = MAX_RECORD_BYTES
) -> Iterator[bytes]:
    """The lines of a file read ``chunk_size`` bytes at a time, as ``split_lines`` splits them.

    Time is linear however long a line is: a line cut by a chunk's end is kept in pieces, joined once. Memory
    stays bounded by ``max_line`` plus a chunk: a longer line comes back as ``OVERLONG``, its bytes dropped.
    """
    pieces: list[bytes] = []  # the line being read, in the pieces read so far
    held = 0  # their length
    overlong = False
    while chunk := fh.read(chunk_size):
        start = 0
        end = chunk.find(b"\n")
        while end >= 0:
            if overlong or held + end - start > max_line:
                yield OVERLONG
            elif pieces:
                pieces.append(chunk[start:end])
                yield b"".join(pieces)
            else:
                yield chunk[start:end]
            pieces, held, overlong = [], 0, False
            start = end + 1
            end = chunk.find(b"\n", start)
        if start < len(chunk) and not overlong:
            held += len(chunk) - start
            if held > max_line:
                pieces, overlong = [], True
            else:
                pieces.append(chunk[start:] if start else chunk)
    if overlong:
        yield OVERLONG
    elif pieces:
        yield b"".join(pieces)


def loads_line(line: bytes | memoryview) -> Any:
    """``loads_like_node`` of one JSONL line; BrokenLine when it is not JSON."""
    try:
        return loads_like_node(line)
    except (orjson.JSONDecodeError, RecursionError):
        raise BrokenLine from None


def classify_record(record: Any) -> Event:
    """What one decoded line says (see ``Event``): the one statement of which record is which."""
    if not isinstance(record, dict):
        return "unknown", None, None
    if "$rewindTo" in record:
        return "rewind", record["$rewindTo"], None
    if "$set" in record:
        patch = record["$set"]
        return ("set", *_meta_and_pairs(patch)) if isinstance(patch, dict) else ("set", {}, None)
    mid = record.get("id")
    if isinstance(mid, str):
        return "message", mid, record
    if "sessionId" in record:
        return ("meta", *_meta_and_pairs(record))
    return "unknown", None, None


def _meta_and_pairs(record: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, Any]] | None]:
    """A record's metadata (all but ``messages``) and its messages that have an id, by id."""
    msgs = record.get("messages")
    meta = {k: v for k, v in record.items() if k != "messages"}
    if not isinstance(msgs, list):
        return meta, None
    return meta, [(m["id"], m) for m in msgs if isinstance(m, dict) and isinstance(m.get("id"), str)]


def _carry_tokens_dict(previous: MessageRecord, message: MessageRecord) -> MessageRecord | None:
    """A later copy without ``tokens`` keeps what the earlier copy recorded of the request; every later
    copy keeps the first copy's timestamp.

    Gemini CLI rewrites messages without ``tokens``, ``model`` and ``toolCalls`` when it rebuilds history
    (chatRecordingService.ts ``updateMessagesFromHistory`` @ 5411f113ca); the request was still made."""
    first_time = previous.get("timestamp")
    if message.get("tokens") is not None or previous.get("tokens") is None:
        if first_time is None or message.get("timestamp") == first_time:
            return None
        # A rewrite (on resume, Gemini CLI 0.61.0 stamps every message it re-records with the resume's time)
        # does not move when the message was first recorded.
        return cast(MessageRecord, {**message, "timestamp": first_time})
    merged = {**message, "tokens": previous.get("tokens")}
    if first_time is not None:
        merged["timestamp"] = first_time
    if message.get("model") is None and previous.get("model") is not None:
        merged["model"] = previous["model"]
    if not message.get("toolCalls") and previous.get("toolCalls"):
        merged["toolCalls"] = previous["toolCalls"]
    return cast(MessageRecord, merged)


def _describe_broken(whole_error: str | None, data: bytes) -> str:
    if whole_error is None:
        try:
            loads_like_node(data)
        except orjson.JSONDecodeError as exc:
            whole_error = str(exc)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"is not valid UTF-8 (byte {exc.start})"
    message = (whole_error or "").lower()
    if "recursion" in message or "depth limit" in message:
        return "is nested too deeply to parse (over 1024 levels)"
    if any(word in message for word in ("eof", "end of", "unexpected end", "truncated")):
        return "is a truncated JSON document (the file ends mid-record; was it still being written?)"
    return "is not JSON"
