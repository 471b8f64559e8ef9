"""Session identity without polars: which files make one session (a legacy ``.json`` and its resumed
``.jsonl``, the stray files of resumes) and which session a subagent belongs to. Must not import polars:
a fast path (the ``guard`` hook) groups files exactly as the frames do."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from ctxtool.session.columns import FileColumns

from ctxtool.session.discover import short_id_of

# A parent reference that is a short id (a legacy flat subagent's, see ``short_id_of``): matched as a prefix.
_SHORT_REF = re.compile(r"[a-zA-Z0-9]{8}")


def link_parents(sessions: Iterable[tuple[str, str, str | None, str | None]]) -> dict[str, str]:
    """Parent session key of each subagent session: (key, project_dir, session_id, parent_ref) in, key -> key.

    A nested file ``chats/<parent-id>/<id>.json[l]`` belongs to the session whose id is ``<parent-id>`` in
    the same project; ``chats/skill-extraction-<8hex>/`` to the session whose id starts with those 8 hex; a
    legacy flat subagent file ``chats/session-<time>-<id8>.json[l]`` to the session whose id starts with
    ``<id8>``, as Gemini CLI's ``deleteSession`` finds it (``short_id_of``)."""
    rows = list(sessions)
    by_id: dict[tuple[str, str], str] = {}
    for key, project_dir, session_id, parent_ref in rows:
        if session_id and parent_ref is None:
            by_id.setdefault((project_dir, session_id), key)
    by_project: dict[str, list[tuple[str, str]]] | None = None  # (id, key) per project, made when needed
    out: dict[str, str] = {}
    for key, project_dir, _sid, parent_ref in rows:
        if parent_ref is None:
            continue
        parent = by_id.get((project_dir, parent_ref))
        prefix: str | None = parent_ref.removeprefix("skill-extraction-")
        if prefix == parent_ref and not _SHORT_REF.fullmatch(parent_ref):
            prefix = None
        if parent is None and prefix is not None:
            if by_project is None:
                by_project = {}
                for (proj, sid), k in by_id.items():
                    by_project.setdefault(proj, []).append((sid, k))
            parent = next((k for sid, k in by_project.get(project_dir, ()) if sid.startswith(prefix)), None)
        if parent is not None:
            out[key] = parent
    return out


class _Session(msgspec.Struct):
    key: str
    files: list[FileColumns]

    @property
    def primary(self) -> FileColumns:
        return self.files[-1]


def session_key(where: str) -> str:
    """A session's key: 12 hex digits of a hash of its file (or .json/.jsonl pair) path. Short on purpose:
    polars stores strings of up to 12 bytes inline; 48 bits make a collision unlikely below millions."""
    from ctxtool.common.digest import blake2b

    return blake2b(where.encode("utf-8"), digest_size=6).hexdigest()


def parent_ref_of(primary: FileColumns) -> str | None:
    """What names a session's parent: the folder of a nested subagent file (``chats/<parent-id>/``), or the
    short id in the name of a legacy flat subagent file (``chats/session-*-<id8>``, see ``short_id_of``)."""
    if primary.parent_ref is not None or primary.kind != "subagent":
        return primary.parent_ref
    return short_id_of(os.path.basename(primary.path))


def group_sessions(results: list[FileColumns]) -> list[_Session]:
    """Pair session-X.json with the session-X.jsonl Gemini CLI wrote on resume; everything else is its own,
    but for the stray files of resumes (``_resume_strays``)."""
    groups: dict[str, list[FileColumns]] = {}
    for fc in results:
        groups.setdefault(fc.group_key, []).append(fc)
    strays = _resume_strays(groups)
    sessions = []
    for key, members in groups.items():
        # .json before .jsonl: the .jsonl is the later copy and the one Gemini CLI resumes.
        members.sort(key=lambda f: (f.era != "json", f.path))
        if len(members) == 1 or len({m.session_id for m in members}) == 1:
            where = members[0].path if len(members) == 1 else key
            sessions.append(_Session(session_key(where), [*strays.get(key, []), *members]))
        else:
            sessions.extend(_Session(session_key(m.path), [m]) for m in members)
    return sessions


def _resume_strays(groups: dict[str, list[FileColumns]]) -> dict[str, list[FileColumns]]:
    """Files a resume left behind, by the group key of the session they belong to; removed from ``groups``.

    On ``--resume``, Gemini CLI 0.61.0 first starts a new session file named for the current minute (the
    environment message alone, by ``$set.messages``) and then switches to the resumed one, with the same
    session id (gemini.tsx startup, then chatRecordingService.ts ``initialize`` with
    ``resumedSessionData``). When the minute differs, that start stays behind: one message, set by a
    checkpoint, with the session id of a fuller file in the same folder. (Files that merely share an id,
    such as a2a-server sessions, have no checkpoint.)"""
    owners: dict[tuple[str, str], tuple[int, str]] = {}
    for key, members in groups.items():
        for m in members:
            if m.session_id is not None:
                place = (os.path.dirname(m.path), m.session_id)
                if (best := owners.get(place)) is None or m.n_messages > best[0]:
                    owners[place] = (m.n_messages, key)
    strays: dict[str, list[FileColumns]] = {}
    for key in list(groups):
        members = groups[key]
        stray = members[0]
        if len(members) != 1 or stray.n_messages != 1 or not stray.checkpoints or stray.session_id is None:
            continue
        owner = owners.get((os.path.dirname(stray.path), stray.session_id))
        if owner is not None and owner[1] != key and owner[0] > stray.n_messages:
            strays.setdefault(owner[1], []).append(stray)
            del groups[key]
    for found in strays.values():
        found.sort(key=lambda f: f.path)
    return strays
