"""Write Gemini CLI session files: canonical serialisation in a file's own era, atomic replacement, backups.

Owns the bytes ctxtool writes for a session:

* ``.jsonl`` (current era): the metadata line, then one line per message, then an optional
  ``{"$set":{"memoryScratchpad":…}}`` line, each ``JSON.stringify(x)`` followed by ``"\\n"``. This is the
  form ``rewriteConversationFile`` writes (packages/core/src/services/chatRecordingService.ts, 348fc35f17).
* ``.json`` (legacy era): one document, ``JSON.stringify(conversation, null, 2)``, no trailing newline, as
  ``ChatRecordingService.writeConversation`` wrote it before 2026-04-09.

"Canonical" means what JavaScript would print for the value as loaded: orjson does the work and this
module corrects where it differs from ``JSON.stringify``: numbers (``1e-6`` vs ``0.000001``) and objects
with integer-like keys, which a JS object lists first in ascending order. A record Gemini CLI wrote therefore
comes back with the same bytes.

Writes go to a temporary file in the target's directory, fsynced and renamed over the target, so a reader
never sees half a file; ``replace_checked`` also refuses when the target changed since it was read.

Must not: import ``ctxtool.compress`` (the session layer sits below it), print, or decide where files go."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from ctxtool.common.errors import CtxtoolError, OutputError
from ctxtool.common.jsvalue import is_array_index, js_key_order, js_number_to_string
from ctxtool.session.read import Era

BACKUP_MARKER = ".ctxtool-backup-"
_MAX_SAFE_INTEGER = 2**53 - 1
# Metadata keys Gemini CLI writes first, in its own order (ConversationRecord, chatRecordingTypes.ts).
_HEAD_KEYS = ("sessionId", "projectHash", "startTime", "lastUpdated")
_SCRATCHPAD_KEY = "memoryScratchpad"
# Temporary files ctxtool writes carry this and the writing process's id in their name, so that a later run
# can prove a leftover is its own (the name) and abandoned (no process of that id): see clean_stale_temps.
TEMP_MARK = "ctxtool-tmp-"
_TEMP_RE = re.compile(r"^\.(?P<name>.+)\." + re.escape(TEMP_MARK) + r"(?P<pid>\d+)-[A-Za-z0-9_]+\.tmp$")


def js_number(x: float) -> str:
    """ECMAScript ``Number::toString`` as ``JSON.stringify`` prints a number (NaN and ±Infinity: null)."""
    return js_number_to_string(x) if math.isfinite(x) else "null"


def _js_ready(value: Any) -> Any:
    """``value`` with what orjson would print differently from ``JSON.stringify`` fixed; the same object
    when nothing needs fixing."""
    if isinstance(value, str) or value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if -_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER:
            return value
        return orjson.Fragment(js_number(float(value)))  # JSON.parse already rounded it to a double
    if isinstance(value, float):
        text = js_number(value)
        return value if orjson.dumps(value) == text.encode() else orjson.Fragment(text)
    if isinstance(value, (dict, list)):
        changed: Any = None
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            fixed = _js_ready(item)
            if fixed is not item:
                if changed is None:
                    changed = value.copy()
                changed[key] = fixed
        out = value if changed is None else changed
        if isinstance(out, dict) and any(is_array_index(k) for k in out):
            out = {k: out[k] for k in js_key_order(out)}
        return out
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def stringify(value: Any, *, indent: bool = False) -> bytes:
    """``JSON.stringify(value)`` (or ``JSON.stringify(value, null, 2)`` with ``indent``) as UTF-8 bytes."""
    option = orjson.OPT_INDENT_2 if indent else 0
    try:
        return orjson.dumps(_js_ready(value), option=option)
    except orjson.JSONEncodeError as exc:  # lone surrogates, keys that are not strings
        raise CtxtoolError(
            f"a session value cannot be written as JSON ({exc})", "Report this with --traceback"
        ) from None


def session_bytes(era: Era, metadata: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]) -> bytes:
    """The canonical bytes of a session with ``metadata`` and ``messages`` in ``era``.

    ``.json``: ``messages`` follows the four standard keys present (sessionId, projectHash, startTime,
    lastUpdated), then the other metadata keys in their order; this is where Gemini CLI's record has them."""
    head = {k: v for k, v in metadata.items() if k != _SCRATCHPAD_KEY and k != "messages"}
    scratchpad = metadata.get(_SCRATCHPAD_KEY)
    if era == "jsonl":
        lines = [stringify(head), *(stringify(m) for m in messages)]
        if scratchpad is not None:
            lines.append(stringify({"$set": {_SCRATCHPAD_KEY: scratchpad}}))
        return b"\n".join(lines) + b"\n"
    doc: dict[str, Any] = {k: head[k] for k in _HEAD_KEYS if k in head}
    doc["messages"] = list(messages)
    doc.update((k, v) for k, v in head.items() if k not in doc)
    if scratchpad is not None:
        doc[_SCRATCHPAD_KEY] = scratchpad
    return stringify(doc, indent=True)


@dataclass(frozen=True)
class FileStamp:
    """What a file looked like when ctxtool read it: compared again right before replacing it."""

    size: int
    mtime_ns: int
    sha256: str

    @classmethod
    def of_bytes(cls, data: bytes, path: Path) -> FileStamp:
        return cls(len(data), path.stat().st_mtime_ns, hashlib.sha256(data).hexdigest())

    @classmethod
    def of_file(cls, path: Path) -> FileStamp:
        return cls.of_bytes(path.read_bytes(), path)


class FileChangedError(CtxtoolError):
    """The file changed on disk between ctxtool reading it and replacing it."""


def clean_stale_temps(directory: Path) -> list[Path]:
    """Remove the temporary files a ctxtool process killed mid-write (``kill -9``, a power cut) left in
    ``directory``: only names ctxtool makes, and only when no process of the id in the name is running.
    Returns what was removed."""
    removed: list[Path] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        found = _TEMP_RE.match(name)
        if found is None or _alive(int(found.group("pid"))):
            continue
        path = directory / name
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process of that id: not provably ours
    return True


def temp_beside(directory: Path, name: str, *, like: Path | None = None) -> tuple[int, Path]:
    """A temporary file beside ``name`` with the mode the final file should have: ``like``'s (a backup or a
    copy of a session keeps the original's, so a private session stays private), else the existing file's,
    else what a plain ``open()`` gives (mkstemp's 0600 would hide a file from its owner's other tools)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.{TEMP_MARK}{os.getpid()}-", suffix=".tmp", dir=directory)
    mode = None
    for source in (like, directory / name):
        with contextlib.suppress(OSError):
            mode = source.stat().st_mode & 0o7777 if source is not None else None
        if mode is not None:
            break
    if mode is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    os.fchmod(fd, mode)
    return fd, Path(tmp)


def _write_fd(fd: int, chunks: Iterable[bytes]) -> None:
    with os.fdopen(fd, "wb") as fh:
        for chunk in chunks:
            fh.write(chunk)
        fh.flush()
        os.fsync(fh.fileno())


def atomic_write(
    path: Path, data: bytes | Iterable[bytes], *, exclusive: bool = False, like: Path | None = None
) -> None:
    """Write ``data`` (bytes, or chunks of them) to ``path`` through a temporary file in the same directory,
    fsync and a rename.

    ``exclusive``: refuse (OutputError, as for any file that cannot be written) when ``path`` already
    exists, instead of replacing it. ``like``: give the file that file's mode (see temp_beside)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temp_beside(path.parent, path.name, like=like)
    except OSError as exc:
        raise OutputError(path, exc) from exc
    try:
        _write_fd(fd, [data] if isinstance(data, bytes) else data)
        if exclusive:
            os.link(tmp, path)  # fails if path exists; the temp name is removed below
            tmp.unlink()
        else:
            os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise OutputError(path, exc) from exc
        raise


def replace_checked(
    path: Path, data: bytes, expected: FileStamp, *, before_replace: Callable[[], object] | None = None
) -> None:
    """Replace ``path`` with ``data`` atomically, but only if it still matches ``expected``.

    The target's stamp is compared with ``expected`` after the temporary file is written, right before the
    rename; ``before_replace`` runs between the two (tests simulate a racing writer with it). A changed file
    raises FileChangedError and is left untouched."""
    path = Path(path)
    fd, tmp = temp_beside(path.parent, path.name)
    try:
        _write_fd(fd, [data])
        if before_replace is not None:
            before_replace()
        try:
            now: FileStamp | None = FileStamp.of_file(path)
        except OSError:
            now = None
        if now != expected:
            raise FileChangedError(
                f"{path}: changed on disk while ctxtool was compacting it (is Gemini CLI still writing it?); "
                "nothing was replaced",
                "Close the Gemini CLI session that uses it and run the command again",
            )
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def backup_path(path: Path, now: datetime) -> Path:
    """``<file>.ctxtool-backup-<UTC timestamp>``; a counter is added if that name is taken."""
    stamp = now.strftime("%Y%m%dT%H%M%S%fZ")
    candidate = path.with_name(f"{path.name}{BACKUP_MARKER}{stamp}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}{BACKUP_MARKER}{stamp}-{n}")
    return candidate


def write_backup(path: Path, data: bytes, now: datetime) -> Path:
    """Save ``data`` (the bytes read from ``path``) beside it, never replacing an existing file."""
    target = backup_path(path, now)
    atomic_write(target, data, exclusive=True, like=path)
    return target
