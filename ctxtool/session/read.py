"""Read one Gemini CLI session file, of any era, into its live history and its billed record.

Owns: sniffing the format from the bytes (never the extension), the JSONL replay rules of Gemini CLI's
``loadConversationRecord`` (packages/core/src/services/chatRecordingService.ts @ 5411f113ca), and two views:

* **live**: the message list Gemini CLI would resume (upserts, ``$set.messages`` checkpoints and
  ``$rewindTo`` applied);
* **billed**: every distinct message ever recorded in the file (the last copy of each id, in order of first
  appearance), including messages a rewind or a checkpoint later dropped: those requests were paid for.

Must not: print, import polars/rich/typer, or guess at anything it cannot read (it raises
``SessionFormatError`` naming the file and the fix).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import orjson

from ctxtool.errors import SessionFormatError
from ctxtool.session.schema import MessageRecord

Era = Literal["json", "jsonl"]

_NOT_A_SESSION_FIX = "Pass only Gemini CLI session files (~/.gemini/tmp/<project>/chats/session-*.json[l])"


@dataclass(slots=True)
class SessionFile:
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
    unknown_records: int = 0
    rewinds: int = 0
    checkpoints: int = 0
    set_records: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def session_id(self) -> str | None:
        value = self.metadata.get("sessionId")
        return value if isinstance(value, str) else None

    @property
    def kind(self) -> str:
        value = self.metadata.get("kind")
        return value if isinstance(value, str) else "main"


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
    stripped = data.lstrip()
    if not stripped:
        raise SessionFormatError(p, "is empty", "Delete it, or pass only files Gemini CLI finished writing")
    if stripped[:1] not in (b"{", b"["):
        raise _not_json(p, data)

    # A whole JSON document: legacy .json (pretty or compact), a .jsonl holding one document, or a
    # header-only .jsonl. Failing that, the file is read line by line (current .jsonl, or .json as lines).
    try:
        whole = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        whole_error: str | None = str(exc)
    else:
        whole_error = None
        if isinstance(whole, dict) and whole.get("messages") is not None:
            return _from_document(p, whole, len(data))
        if isinstance(whole, dict) and "sessionId" in whole and b"\n" in data.strip():
            # A pretty-printed document with no messages yet: a legacy file written before any message.
            return _from_document(p, whole, len(data))
        if not isinstance(whole, dict):
            raise SessionFormatError(
                p, f"is JSON ({type(whole).__name__}) but not a Gemini CLI session", _NOT_A_SESSION_FIX
            )
    return _from_lines(p, data, whole_error)


def _not_json(p: Path, data: bytes) -> SessionFormatError:
    try:
        data[:4096].decode("utf-8")
    except UnicodeDecodeError:
        return SessionFormatError(p, "is not UTF-8 text", _NOT_A_SESSION_FIX)
    return SessionFormatError(p, "is not JSON", _NOT_A_SESSION_FIX)


def _from_document(p: Path, doc: dict[str, Any], size: int) -> SessionFile:
    raw = doc.get("messages")
    messages: list[MessageRecord] = []
    if raw is not None:
        if not isinstance(raw, list):
            raise SessionFormatError(p, "has a 'messages' field that is not a list", _NOT_A_SESSION_FIX)
        messages = [cast(MessageRecord, m) for m in raw if isinstance(m, dict)]
    metadata = {k: v for k, v in doc.items() if k != "messages"}
    # A legacy file is rewritten whole on every update, so a rewind leaves no trace: billed == live.
    return SessionFile(p, "json", metadata, messages, list(messages), size=size, lines=1)


def _from_lines(p: Path, data: bytes, whole_error: str | None) -> SessionFile:
    metadata: dict[str, Any] = {}
    live: dict[str, MessageRecord] = {}
    billed: dict[str, MessageRecord] = {}
    result = SessionFile(p, "jsonl", metadata, [], [], size=len(data))
    records = 0
    saw_session = False
    loads = orjson.loads
    chunks = data.split(b"\n")
    if chunks and not chunks[-1]:
        chunks.pop()  # the newline that ends the last record
    for number, line in enumerate(chunks, 1):
        if not line.strip():
            result.blank_lines += 1
            continue
        result.lines += 1
        try:
            record = loads(line)
        except orjson.JSONDecodeError:
            result.broken_lines += 1
            if result.first_broken_line is None:
                result.first_broken_line = number
            continue
        records += 1
        if not isinstance(record, dict):
            result.unknown_records += 1
            continue
        if "$rewindTo" in record:
            _rewind(live, record["$rewindTo"])
            result.rewinds += 1
            saw_session = True
        elif "$set" in record:
            patch = record["$set"]
            result.set_records += 1
            if isinstance(patch, dict):
                for key, value in patch.items():
                    if key == "messages":
                        if isinstance(value, list):
                            _checkpoint(live, billed, value)
                            result.checkpoints += 1
                    else:
                        metadata[key] = value
            saw_session = True
        elif isinstance(record.get("id"), str):
            message = cast(MessageRecord, record)
            live[record["id"]] = message
            _bill(billed, message)
            saw_session = True
        elif "sessionId" in record:
            # A metadata (header) line; it may repeat when a session is re-initialised. A legacy whole
            # record that also carries `messages` replaces the list.
            msgs = record.get("messages")
            for key, value in record.items():
                if key != "messages":
                    metadata[key] = value
            if isinstance(msgs, list):
                _checkpoint(live, billed, msgs)
            saw_session = True
        else:
            result.unknown_records += 1

    if not saw_session:
        if records == 0:
            reason = _describe_broken(whole_error, data)
            raise SessionFormatError(p, reason, _fix_for(reason))
        raise SessionFormatError(p, "is JSON but not a Gemini CLI session", _NOT_A_SESSION_FIX)
    result.messages = list(live.values())
    result.billed = list(billed.values())
    return result


def _bill(billed: dict[str, MessageRecord], message: MessageRecord) -> None:
    """Keep the last copy of each id; a later copy without tokens keeps the tokens already recorded."""
    key = cast(str, message.get("id"))
    previous = billed.get(key)
    if previous is not None and message.get("tokens") is None and previous.get("tokens") is not None:
        message = cast(MessageRecord, {**message, "tokens": previous.get("tokens")})
    billed[key] = message


def _checkpoint(
    live: dict[str, MessageRecord], billed: dict[str, MessageRecord], messages: list[Any]
) -> None:
    # `$set.messages` clears the map and rebuilds it from the list (chatRecordingService.ts, 055e0f6452).
    live.clear()
    for raw in messages:
        if isinstance(raw, dict) and isinstance(raw.get("id"), str):
            message = cast(MessageRecord, raw)
            live[raw["id"]] = message
            _bill(billed, message)


def _rewind(live: dict[str, MessageRecord], target: Any) -> None:
    # Drop the message and everything after it; an id that is not there clears everything
    # (loadConversationRecord @ 5411f113ca).
    keys = list(live)
    try:
        index = keys.index(target)
    except ValueError:
        live.clear()
        return
    for key in keys[index:]:
        del live[key]


def _describe_broken(whole_error: str | None, data: bytes) -> str:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"is not valid UTF-8 (byte {exc.start})"
    message = (whole_error or "").lower()
    if "recursion" in message or "depth limit" in message:
        return "is nested too deeply to parse (over 1024 levels)"
    if "eof" in message or "end of" in message or "unexpected end" in message:
        return "is a truncated JSON document (the file ends mid-record; was it still being written?)"
    return "is not JSON"


def _fix_for(reason: str) -> str:
    if "truncated" in reason:
        return "Re-run when Gemini CLI has finished writing it, or restore it from a backup"
    return _NOT_A_SESSION_FIX
