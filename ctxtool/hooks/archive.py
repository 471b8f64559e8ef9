"""``ctxtool archive``: a Gemini CLI ``SessionEnd`` (and ``PreCompress``) hook that adds the session to the
Parquet dataset of ``ctxtool export``, so its history outlives Gemini CLI's cleanup (30 days by default).

Owns: which files make the session of a hook event (its transcript, the ``.json`` twin of a legacy session,
its subagents' folder ``chats/<session id>/``), and the order of one archive: note the session in the
dataset's pending list, take over the entries earlier hooks left there, wait for the dataset (within the
hook's time), add them all, then forget them. A session that could not be added stays noted, and the next
archive or export adds it: none is dropped because two Gemini CLI windows closed at once. The dataset and
its pending list are ``ctxtool.export``'s: a session already there is replaced when it grew and skipped
when unchanged, never duplicated. Must not print.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxtool.common.errors import CtxtoolError

if TYPE_CHECKING:
    from ctxtool.export import ExportResult

# Seconds an archive waits for the dataset, counted from its start: Gemini CLI stops the hook after
# ARCHIVE_TIMEOUT_MS (ctxtool.hooks.settings, 120 s), and adding the session takes a second or two after.
ARCHIVE_WAIT = 100.0


class NotArchived(CtxtoolError):
    """The session is not in the dataset. ``kept``: it is in the pending list, and the next archive or export
    adds it (the fix says so); otherwise the fix says what to run."""

    def __init__(self, message: str, fix: str, *, kept: bool) -> None:
        self.kept = kept
        super().__init__(message, fix)


def session_files(event: Mapping[str, Any]) -> list[str]:
    """The files of the session a hook event names (absolute paths that exist)."""
    transcript = event.get("transcript_path")
    if not isinstance(transcript, str) or not transcript:
        raise ValueError("the hook event names no transcript_path")
    path = Path(os.path.abspath(transcript))
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the session file the hook event names does not exist")
    out = [str(path)]
    for twin in (path.with_suffix(".json"), path.with_suffix(".jsonl")):
        if twin != path and twin.is_file():
            out.append(str(twin))
    session_id = event.get("session_id")
    if isinstance(session_id, str) and session_id and "/" not in session_id:
        subagents = path.parent / session_id
        if subagents.is_dir():
            out.append(str(subagents))
    return out


def archive(
    event: Mapping[str, Any],
    to: str | Path,
    *,
    wait: float = ARCHIVE_WAIT,
    on_wait: Callable[[], object] | None = None,
) -> ExportResult:
    """Add the session of ``event`` to the dataset at ``to``, with the sessions earlier archives left in its
    pending list; wait at most ``wait`` seconds (from now) for another run to finish. NotArchived when the
    session could not be added."""
    from ctxtool import export as ex
    from ctxtool.common.errors import OutputError
    from ctxtool.frames.loading import load_corpus

    start = time.monotonic()
    files = session_files(event)
    try:
        mine = ex.note_pending(to, files)
    except OutputError as exc:
        raise NotArchived(
            str(exc),
            f"Once that is fixed, run: ctxtool export --to {to} (it adds every session Gemini CLI has)",
            kept=False,
        ) from exc
    entries = [mine, *ex.claim_pending(to)]
    try:
        corpus, _ = load_corpus(ex.pending_files(entries), cache=False, workers=1)
        left = max(wait - (time.monotonic() - start), 0.0)
        result = ex.export_corpus(corpus, to, wait=left, on_wait=on_wait)
        for entry in entries:
            entry.done()
        return result
    except Exception as exc:
        what = str(exc) if isinstance(exc, CtxtoolError) else f"{type(exc).__name__}: {exc}"
        raise NotArchived(
            what, f"It is kept in {mine.path.parent}: the next ctxtool archive or export adds it", kept=True
        ) from exc
    finally:
        for entry in entries:
            entry.release()
