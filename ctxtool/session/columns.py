"""Flatten one session file into plain columns, cheaply, so worker processes can hand back lists, not objects.

Owns: what a message *is* for reporting (a prompt, a command, a compression event, a request with tokens),
the per-file summary, and the worker entry point ``extract_file``. Imports only the reader and orjson, so a
worker process starts fast. Must not: import polars (the parent builds frames once from these lists).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ctxtool.errors import SessionFormatError
from ctxtool.session.discover import SessionPath
from ctxtool.session.read import SessionFile, read_session

MESSAGE_COLUMNS = (
    "message_id",
    "type",
    "timestamp",
    "live",
    "text_chars",
    "is_prompt",
    "is_command",
    "is_snapshot",
    "compression_info",
    "model",
    "preview",
    "tool_calls",
    "tool_errors",
    "input",
    "output",
    "cached",
    "thoughts",
    "tool",
    "total",
)
PREVIEW_CHARS = 80
TOOL_COLUMNS = ("message_id", "call_id", "name", "status", "timestamp", "result_chars")

# Markers the interactive UI records as `info` messages when it compresses (spec §12.1).
_COMPRESSED_INFO = re.compile(
    r"^(Context compressed from \d+% to \d+%\."
    r"|IMPORTANT: .*compressed context will be sent for future messages)"
)
_NOT_PROMPT_PREFIXES = ("/", "?", "<session_context>", "<hook_context>", "<state_snapshot>")


@dataclass(slots=True)
class FileColumns:
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
    lines: int = 0
    blank_lines: int = 0
    broken_lines: int = 0
    first_broken_line: int | None = None
    unknown_records: int = 0
    rewinds: int = 0
    checkpoints: int = 0
    live_messages: int = 0
    messages: dict[str, list[Any]] = field(default_factory=dict)
    tools: dict[str, list[Any]] = field(default_factory=dict)


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
    if isinstance(content, list):
        return any(isinstance(p, dict) and ("inlineData" in p or "fileData" in p) for p in content)
    return False


def classify_user(content: Any) -> tuple[bool, bool, bool]:
    """(is_prompt, is_command, is_snapshot) for a ``user`` message.

    A prompt is what a person sent: non-empty text (or an attached file) that is not a ``/`` or ``?``
    command and not a ``<session_context>``, ``<hook_context>`` or ``<state_snapshot>`` block. Synthetic
    user turns made only of functionResponse parts (written since v0.44) are not prompts.
    """
    text = message_text(content).strip()
    if not text:
        return _has_media(content), False, False
    if text.startswith(("/", "?")):
        return False, True, False
    if text.startswith("<state_snapshot>"):
        return False, False, True
    return not text.startswith(_NOT_PROMPT_PREFIXES), False, False


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _result_chars(result: Any) -> int:
    if result is None:
        return 0
    if isinstance(result, str):
        return len(result)
    if isinstance(result, dict):
        result = [result]
    total = 0
    if isinstance(result, list):
        for part in result:
            if isinstance(part, str):
                total += len(part)
            elif isinstance(part, dict):
                fr = part.get("functionResponse")
                if isinstance(fr, dict):
                    resp = fr.get("response")
                    if isinstance(resp, dict):
                        for v in resp.values():
                            total += len(v) if isinstance(v, str) else 0
                elif isinstance(part.get("text"), str):
                    total += len(part["text"])
    return total


def columns_from_session(sf: SessionFile, sp: SessionPath) -> FileColumns:
    meta = sf.metadata
    out = FileColumns(
        path=str(sp.path),
        group_key=sp.group_key,
        project=sp.project,
        project_dir=sp.project_dir,
        parent_ref=sp.parent_ref,
        era=sf.era,
        size=sf.size,
        session_id=sf.session_id,
        project_hash=_str(meta.get("projectHash")),
        kind=sf.kind,
        start_time=_str(meta.get("startTime")),
        last_updated=_str(meta.get("lastUpdated")),
        summary=_str(meta.get("summary")),
        lines=sf.lines,
        blank_lines=sf.blank_lines,
        broken_lines=sf.broken_lines,
        first_broken_line=sf.first_broken_line,
        unknown_records=sf.unknown_records,
        rewinds=sf.rewinds,
        checkpoints=sf.checkpoints,
        live_messages=len(sf.messages),
    )
    m: dict[str, list[Any]] = {name: [] for name in MESSAGE_COLUMNS}
    t: dict[str, list[Any]] = {name: [] for name in TOOL_COLUMNS}
    live_ids = {id(msg) for msg in sf.messages}
    live_keys = {msg.get("id") for msg in sf.messages}
    for msg in sf.billed:
        mid = msg.get("id")
        mtype = msg.get("type")
        mtype = mtype if isinstance(mtype, str) else "unknown"
        content = msg.get("content")
        is_prompt = is_command = is_snapshot = compression = False
        if mtype == "user":
            is_prompt, is_command, is_snapshot = classify_user(content)
            text_chars = len(message_text(content))
        else:
            text = message_text(content)
            text_chars = len(text)
            if mtype == "info":
                compression = _COMPRESSED_INFO.match(text) is not None
        calls = msg.get("toolCalls")
        n_calls = n_errors = 0
        if isinstance(calls, list):
            for call in calls:
                if not isinstance(call, dict):
                    continue
                n_calls += 1
                status = call.get("status")
                if status == "error":
                    n_errors += 1
                t["message_id"].append(mid)
                t["call_id"].append(_str(call.get("id")))
                t["name"].append(_str(call.get("name")))
                t["status"].append(_str(status))
                t["timestamp"].append(_str(call.get("timestamp")))
                t["result_chars"].append(_result_chars(call.get("result")))
        tokens = msg.get("tokens")
        m["message_id"].append(mid)
        m["type"].append(mtype)
        m["timestamp"].append(_str(msg.get("timestamp")))
        m["live"].append(id(msg) in live_ids or mid in live_keys)
        m["text_chars"].append(text_chars)
        m["is_prompt"].append(is_prompt)
        m["is_command"].append(is_command)
        m["is_snapshot"].append(is_snapshot)
        m["compression_info"].append(compression)
        m["model"].append(_str(msg.get("model")))
        m["preview"].append(_preview(content) if is_prompt else None)
        m["tool_calls"].append(n_calls)
        m["tool_errors"].append(n_errors)
        if isinstance(tokens, dict) and mtype == "gemini":
            for key in ("input", "output", "cached", "thoughts", "tool", "total"):
                m[key].append(_int(tokens.get(key)) or 0)
        else:
            for key in ("input", "output", "cached", "thoughts", "tool", "total"):
                m[key].append(None)
    out.messages = m
    out.tools = t
    return out


def _preview(content: Any) -> str:
    text = " ".join(message_text(content).split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def extract_file(sp: SessionPath) -> FileColumns:
    """Worker entry point: read and flatten one file; a bad file comes back with ``error`` set."""
    try:
        sf = read_session(sp.path)
    except SessionFormatError as exc:
        return FileColumns(
            str(sp.path), sp.group_key, sp.project, sp.project_dir, sp.parent_ref, error=str(exc)
        )
    except RecursionError:
        return FileColumns(
            str(sp.path),
            sp.group_key,
            sp.project,
            sp.project_dir,
            sp.parent_ref,
            error=f"{sp.path}: is nested too deeply to read. Pass only Gemini CLI session files",
        )
    except MemoryError:
        return FileColumns(
            str(sp.path),
            sp.group_key,
            sp.project,
            sp.project_dir,
            sp.parent_ref,
            error=f"{sp.path}: is too large to read into memory. Free memory or read it on a larger machine",
        )
    return columns_from_session(sf, sp)
