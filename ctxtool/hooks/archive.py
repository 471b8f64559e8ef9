"""``ctxtool archive``: a Gemini CLI ``SessionEnd`` (and ``PreCompress``) hook writing the session into the
dataset of ``ctxtool export`` (a folder or a store URL), so its history outlives Gemini CLI's cleanup (30 days
by default) and reaches the team's dataset.

Owns: which files make the session of a hook event (its transcript, the ``.json`` twin of a legacy session,
its subagents' folder ``chats/<session id>/``), and the pending list of this machine: a session an archive
could not write (an unreachable store, a full disk, the hook stopped) is noted in ``<cache>/exports/pending/``
before it is written and forgotten after, so the next archive (or a retry of it) writes it too. The dataset
needs no coordination (``ctxtool.export``): archives of two Gemini CLI windows closing at once write
different objects, and a session written twice is the same objects again. Must not print.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxtool.common.errors import CtxtoolError

if TYPE_CHECKING:
    from ctxtool.export import ExportResult


class NotArchived(CtxtoolError):
    """The session is not in the dataset. ``kept``: it is in the pending list, and the next archive or export
    adds it (the fix says so); otherwise the fix says what to run."""

    def __init__(self, message: str, fix: str, *, kept: bool) -> None:  # kept: in the pending list
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


def archive(event: Mapping[str, Any], to: str, *, cache_dir: str | None = None) -> ExportResult:
    """Write the session of ``event`` into the dataset at ``to``, with the sessions earlier archives to ``to``
    could not write. NotArchived when it could not be written (then it is in the pending list)."""
    from ctxtool import export as ex
    from ctxtool.common.identity import identity
    from ctxtool.frames.loading import load_corpus
    from ctxtool.session.discover import default_roots

    files = session_files(event)
    pending = _Pending(to, cache_dir)
    mine = pending.note(files)
    entries = [mine, *pending.others(mine)]
    try:
        every = sorted({f for entry in entries for f in _files_of(entry)})
        corpus, _ = load_corpus(every, cache=False, workers=1)
        roots = [str(root) for root in default_roots()]
        result = ex.export_corpus(corpus, to, identity(), roots=roots, sources=every, state_dir=cache_dir)
    except Exception as exc:
        what = str(exc) if isinstance(exc, CtxtoolError) else f"{type(exc).__name__}: {exc}"
        raise NotArchived(
            what, f"It is noted in {mine.parent}: the next ctxtool archive to {to} writes it", kept=True
        ) from exc
    for entry in entries:
        entry.unlink(missing_ok=True)
    return result


def _files_of(entry: Path) -> list[str]:
    import orjson

    try:
        doc = orjson.loads(entry.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return []
    files = doc.get("files") if isinstance(doc, dict) else None
    return [f for f in files if isinstance(f, str) and os.path.exists(f)] if isinstance(files, list) else []


class _Pending:
    """This machine's sessions not yet written to the dataset ``to``: a file each, named by a hash of their
    files, so that hooks running at once never write the same entry with different contents."""

    def __init__(self, to: str, cache_dir: str | None) -> None:
        from ctxtool.common.digest import blake2b
        from ctxtool.session.stamp import cache_root

        self.to = to
        self.folder = (
            cache_root(cache_dir) / "exports" / "pending" / blake2b(to.encode(), digest_size=12).hexdigest()
        )

    def note(self, files: list[str]) -> Path:
        import orjson

        from ctxtool.common.digest import blake2b
        from ctxtool.session.write import atomic_write

        name = blake2b("\0".join(sorted(files)).encode(), digest_size=12).hexdigest()
        path = self.folder / f"{name}.json"
        try:
            atomic_write(path, orjson.dumps({"to": self.to, "files": files}))
        except CtxtoolError as exc:
            raise NotArchived(
                str(exc),
                f"Once that is fixed, run: ctxtool export --to {self.to} (it adds every session)",
                kept=False,
            ) from exc
        return path

    def others(self, mine: Path) -> list[Path]:
        try:
            return sorted(p for p in self.folder.glob("*.json") if p != mine)
        except OSError:
            return []
