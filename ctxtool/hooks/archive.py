"""``ctxtool archive``: a Gemini CLI ``SessionEnd`` (and ``PreCompress``) hook that adds the session to the
Parquet dataset of ``ctxtool export``, so its history outlives Gemini CLI's cleanup (30 days by default).

Owns: which files make the session of a hook event (its transcript, the ``.json`` twin of a legacy session,
its subagents' folder ``chats/<session id>/``). The dataset itself is ``ctxtool.export``'s: a session already
there is replaced when it grew and skipped when unchanged, never duplicated.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxtool.export import ExportResult


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


def archive(event: Mapping[str, Any], to: str | Path) -> ExportResult:
    """Add the session of ``event`` to the dataset at ``to``."""
    from ctxtool.export import export_corpus
    from ctxtool.frames.loading import load_corpus

    corpus, _ = load_corpus(session_files(event), cache=False, workers=1)
    return export_corpus(corpus, to)
