"""Where Gemini CLI sessions live, and which files on disk are sessions.

Owns: the data roots (``$GEMINI_CLI_HOME/.gemini/tmp``, else ``~/.gemini/tmp``, and the same under
``.cache/`` where Gemini CLI ran in macOS Seatbelt), the layout
``<root>/<project>/chats/session-*.json[l]`` with nested subagent files ``chats/<parent>/<id>.json[l]``
(also ``chats/skill-extraction-<8hex>/…``), what is skipped (``*.unreadable-*`` repair leftovers, temp
files), and the identity key that makes a legacy ``.json`` and the ``.jsonl`` Gemini CLI writes when it
resumes it one session. Must not: open session files (apart from the small ``.project_root`` marker)."""

from __future__ import annotations

import errno
import glob
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ctxtool.common.errors import refuse_url

SESSION_SUFFIXES = (".json", ".jsonl")
_PRUNE_DIRS = {".git", "node_modules", "tool-outputs", "__pycache__"}


@dataclass(frozen=True, slots=True)
class SessionPath:
    """A file to read, with what its place on disk says about it."""

    path: Path
    project: str  # .project_root contents when present, else the folder name under tmp/
    project_dir: str  # the folder name under tmp/ (a sha256 or a slug)
    # For nested files: the folder under chats/ (parent session id, skill-extraction-…).
    parent_ref: str | None
    group_key: str  # same key for session-X.json and session-X.jsonl in one chats/ folder


@dataclass(slots=True)
class Discovery:
    files: list[SessionPath] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # arguments that named nothing
    empty_dirs: list[Path] = field(default_factory=list)  # directories with no session in them
    # Entries the filesystem would not let us examine, or that are no regular file (never opened): the
    # reason key (also in ``skipped``) and the one-line message with its fix.
    unreadable: list[tuple[Path, str, str]] = field(default_factory=list)

    def refuse(self, path: str | Path, key: str, message: str) -> None:
        """Skip one entry for a filesystem reason: counted under ``key``, reported with ``message``."""
        self.skipped.append((Path(path), key))
        self.unreadable.append((Path(path), key, message))


# Why an entry is skipped, by errno: (key for read.skipped_by_reason, what to tell the user).
_OS_REASONS = {
    errno.ELOOP: (
        "symlink loop",
        "is a symlink loop (too many levels of symbolic links). Fix or remove the link",
    ),
    errno.EACCES: (
        "permission denied",
        "cannot be read: permission denied. Make it readable (chmod) or leave it out",
    ),
    errno.EPERM: (
        "permission denied",
        "cannot be read: operation not permitted. Make it readable or leave it out",
    ),
    errno.ENAMETOOLONG: ("name too long", "has a name too long for this system. Rename it"),
    errno.ENOENT: ("vanished", "vanished while it was being scanned (or is a dangling symlink). Run again"),
}
_DANGLING = ("dangling symlink", "is a symlink to a file that does not exist. Remove or fix the link")
_SPECIAL = (
    "not a regular file",
    "is not a regular file (a FIFO, socket or device), so it is never opened. Leave it out",
)


# The file that makes a folder a dataset ``ctxtool export`` wrote (a PATH ``stats`` reads as such): the
# marker of schema 2 (ctxtool.export), or the manifest of schema 1.
DATASET_MARKER = "_ctxtool_dataset.json"
DATASET_MANIFEST = "_ctxtool_manifest.json"
_STORE_URL = re.compile(r"^(s3|gs|az)://[^/]+")


def is_dataset(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a store URL (``s3://``, ``gs://``, ``az://``: only a dataset is read there) or a
    directory ``ctxtool export`` wrote (it holds the marker, or the manifest of schema 1)."""
    text = os.fspath(path)
    if _STORE_URL.match(text):
        return True
    return os.path.isdir(text) and any(
        os.path.isfile(os.path.join(text, name)) for name in (DATASET_MARKER, DATASET_MANIFEST)
    )


def dataset_in(paths: Sequence[str]) -> str | None:
    """The dataset PATHS name (a folder ``ctxtool export`` wrote, or a store URL), which must come alone;
    None for session files and folders."""
    from ctxtool.common.errors import UsageError

    datasets = [str(p) for p in paths if is_dataset(p)]
    if datasets and len(paths) > 1:
        raise UsageError(
            "a ctxtool dataset cannot be combined with other paths",
            f"Pass {datasets[0]} alone, or export the sessions into it first (ctxtool export PATH --to DIR)",
        )
    return datasets[0] if datasets else None


def os_reason(exc: OSError) -> tuple[str, str]:
    """(key, message) for a filesystem error on one entry."""
    return _OS_REASONS.get(exc.errno or 0) or (
        "unreadable",
        f"cannot be examined ({exc.strerror or exc}). Check the file and its folder",
    )


def _is_file(entry: os.DirEntry[str], result: Discovery) -> bool:
    """Whether ``entry`` is a regular file (through symlinks); anything but a file or a folder is refused when
    its name could be a session, so a FIFO is never opened and a symlink loop never aborts the scan."""
    try:
        if entry.is_file(follow_symlinks=False):
            return True
        if entry.is_dir(follow_symlinks=False):
            return False
        mode = os.stat(entry.path).st_mode  # a symlink (followed) or a special file
    except OSError as exc:
        if ".json" in entry.name:
            dangling = exc.errno == errno.ENOENT and entry.is_symlink()
            result.refuse(entry.path, *(_DANGLING if dangling else os_reason(exc)))
        return False
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)) and ".json" in entry.name:
        result.refuse(entry.path, *_SPECIAL)
    return stat.S_ISREG(mode)


def default_root(env: Mapping[str, str] | None = None) -> Path:
    """Gemini CLI's data root: ``$GEMINI_CLI_HOME/.gemini/tmp`` when set, else ``~/.gemini/tmp``."""
    return _home(env) / ".gemini" / "tmp"


def default_roots(env: Mapping[str, str] | None = None) -> list[Path]:
    """Every data root Gemini CLI 0.61 may have written to: ``default_root()``, and the one it uses under
    macOS Seatbelt (``SANDBOX=sandbox-exec``), ``<home>/.cache/.gemini/tmp``, when that folder exists.

    Source: ``Storage.getGlobalRuntimeDir`` / ``getGlobalTempDir`` (packages/core/src/config/storage.ts,
    v0.61.0): inside the Seatbelt sandbox the runtime state (chats included) moves to ``<home>/.cache``."""
    seatbelt = _home(env) / ".cache" / ".gemini" / "tmp"
    return [default_root(env), seatbelt] if seatbelt.is_dir() else [default_root(env)]


def _home(env: Mapping[str, str] | None) -> Path:
    env = os.environ if env is None else env
    home = env.get("GEMINI_CLI_HOME")
    return Path(home).expanduser() if home else Path.home()


def refused_paths(paths: Sequence[str | Path]) -> list[str]:
    """The PATH arguments that name an entry which cannot be read: a symlink loop, a dangling link, one that
    permission denies, a FIFO, socket or device. (A path that names nothing is ``Discovery.missing``.)"""
    refused = []
    for arg in paths:
        path = os.path.expanduser(str(arg))
        if os.path.lexists(path):
            mode = st.st_mode if (st := stat_or_none(path)) is not None else 0  # refused too
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                refused.append(str(arg))
    return refused


def stat_or_none(path: str | os.PathLike[str]) -> os.stat_result | None:
    """``os.stat(path)``; None when it cannot be examined (it vanished, say)."""
    try:
        return os.stat(path)
    except OSError:
        return None


def skip_reason(name: str) -> str | None:
    """Why a file name is not a session to read, or None."""
    if ".unreadable-" in name:
        return "unreadable-file backup left by Gemini CLI"
    if ".ctxtool-backup-" in name:
        return "backup made by ctxtool compact --in-place"
    if name.startswith(".") or name.endswith((".tmp", "~", ".swp", ".part")) or ".tmp." in name:
        return "temporary file"
    return None


def discover(paths: Sequence[str | Path], *, subagents: bool = True) -> Discovery:
    """Resolve PATH arguments (files, directories, globs) to session files, each listed once."""
    result = Discovery()
    seen: set[str] = set()
    project_names: dict[str, str] = {}
    abs_dirs: dict[str, str] = {}

    # Paths are handled as strings here (thousands of files; pathlib costs more than the listing itself).
    def add(parent: str, name: str) -> None:
        # One absolute path per folder, not per file: thousands of files share a few hundred folders.
        # (abspath, not realpath: resolving every folder's symlinks costs more than the rest of the scan.)
        folder = abs_dirs.get(parent)
        if folder is None:
            folder = abs_dirs[parent] = os.path.abspath(parent)
        key = os.path.join(folder, name)
        if key in seen:
            return
        seen.add(key)
        # Reports, projects and session keys use the absolute path, whatever the argument was.
        sp = _describe(key, folder, name, project_names)
        if sp.parent_ref is None or subagents:
            result.files.append(sp)

    for arg in paths:
        refuse_url(arg)
        for target in _expand(arg, result):
            try:
                mode = os.stat(target).st_mode
            except OSError as exc:
                dangling = exc.errno == errno.ENOENT and os.path.islink(target)
                result.refuse(target, *(_DANGLING if dangling else os_reason(exc)))
                continue
            if stat.S_ISDIR(mode):
                found = False
                for folder, name in _scan_dir(str(target), result):
                    found = True
                    add(folder, name)
                if not found:
                    result.empty_dirs.append(target)
            elif stat.S_ISREG(mode):
                add(str(target.parent), target.name)
            else:
                result.refuse(target, *_SPECIAL)
    return result


def _expand(arg: str | Path, result: Discovery) -> Iterable[Path]:
    text = str(arg)
    path = Path(text).expanduser()
    try:
        os.stat(path)
        return [path]
    except FileNotFoundError:
        if os.path.islink(path):
            return [path]  # a dangling symlink: refused with its reason by the caller
    except OSError:
        return [path]  # a symlink loop, a permission denied: refused with its reason by the caller
    if any(ch in text for ch in "*?["):
        matches = sorted(glob.glob(os.path.expanduser(text), recursive=True))
        if matches:
            return [Path(m) for m in matches]
    result.missing.append(text)
    return []


def _walk(root: str, onerror: Callable[[OSError], object]) -> Iterator[tuple[str, list[str] | None]]:
    """The folders under ``root`` as discovery walks them (pruned, in order, not below a ``chats/`` folder),
    each with its file names; None for a ``chats/`` folder (``root`` itself when it is one)."""
    if os.path.basename(root) == "chats":
        yield root, None
        return
    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror):
        chats = os.path.basename(dirpath) == "chats"
        dirnames[:] = [] if chats else sorted(d for d in dirnames if d not in _PRUNE_DIRS)
        yield dirpath, None if chats else filenames


def _scan_dir(root: str, result: Discovery) -> Iterable[tuple[str, str]]:
    """(folder, name) of the session files under ``root``: the Gemini CLI layout if there is a chats/ folder,
    else all JSON."""
    chats_dirs: list[str] = []
    loose: list[tuple[str, str]] = []
    for dirpath, filenames in _walk(root, lambda exc: result.refuse(exc.filename or root, *os_reason(exc))):
        if filenames is None:
            chats_dirs.append(dirpath)
            continue
        for f in sorted(filenames):
            if f.endswith(SESSION_SUFFIXES) and _regular(os.path.join(dirpath, f), result):
                loose.append((dirpath, f))
    if not chats_dirs:
        yield from _filter(loose, result)
        return
    for chats in sorted(chats_dirs):
        entries = _entries(chats, result)
        named = [e for e in entries if e.name.startswith(("session-", ".session-"))]
        yield from _filter([(chats, e.name) for e in named if _is_file(e, result)], result)
        for sub in entries:
            try:
                is_dir = sub.is_dir()
            except OSError:
                continue
            if not is_dir:
                continue
            folder = os.path.join(chats, sub.name)
            names = [e.name for e in _entries(folder, result) if _is_file(e, result)]
            yield from _filter([(folder, n) for n in names], result)


def listing_folders(paths: Sequence[str | Path]) -> list[str] | None:
    """The folders whose entries decide what ``discover(paths)`` finds, each once (as given, not resolved):
    every folder its walk visits, and the subfolders of each ``chats/`` folder. While none of their
    modification times changed, ``discover`` finds the same files (the ``guard`` hook's quick check). None
    when an argument is not a folder or a folder could not be listed."""
    out: dict[str, None] = {}
    for arg in paths:
        root = os.path.expanduser(str(arg))
        if not os.path.isdir(root):
            return None
        failed: list[OSError] = []
        chats_dirs = []
        for dirpath, filenames in _walk(root, failed.append):
            out[dirpath] = None
            if filenames is None:
                chats_dirs.append(dirpath)
        for chats in chats_dirs:
            try:
                with os.scandir(chats) as it:
                    out.update((e.path, None) for e in it if e.is_dir())
            except OSError as exc:
                failed.append(exc)
        if failed:
            return None
    return list(out)


def _entries(folder: str, result: Discovery) -> list[os.DirEntry[str]]:
    """A folder's entries by name; a folder that cannot be listed is refused, not fatal."""
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as exc:
        result.refuse(folder, *os_reason(exc))
        return []


def _regular(path: str, result: Discovery) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        result.refuse(path, *os_reason(exc))
        return False
    if not stat.S_ISREG(mode):
        result.refuse(path, *_SPECIAL)
    return stat.S_ISREG(mode)


def _filter(files: Iterable[tuple[str, str]], result: Discovery) -> Iterable[tuple[str, str]]:
    for folder, name in files:
        if ".json" in name:
            if reason := skip_reason(name):
                result.skipped.append((Path(folder, name), reason))
            else:
                yield folder, name


def _describe(path: str, folder: str, name: str, project_names: dict[str, str]) -> SessionPath:
    """What the place of ``path`` (= ``folder``/``name``, absolute) says about it."""
    parent_ref: str | None = None
    up = os.path.dirname(folder)
    if os.path.basename(folder) == "chats":
        project_dir = up
    elif os.path.basename(up) == "chats":
        project_dir = os.path.dirname(up)
        parent_ref = os.path.basename(folder)
    else:
        project_dir = folder
    project = project_names.get(project_dir)
    if project is None:
        project = project_names[project_dir] = _project_name(project_dir)
    stem = name.rsplit(".", 1)[0]
    return SessionPath(
        Path(path), project, os.path.basename(project_dir), parent_ref, os.path.join(folder, stem)
    )


def _project_name(project_dir: str) -> str:
    # Since 6fb3b09003 (v0.29) the folder is a short slug with a .project_root file holding the real path.
    try:
        with open(os.path.join(project_dir, ".project_root"), encoding="utf-8") as fh:
            text = fh.read().strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    return text or os.path.basename(project_dir)


# --- session ids as PATH arguments ------------------------------------------------------------------------

_ID_ARG = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{3,}")
_SHORT_ID_ARG = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{0,2}")  # too short to be taken for a session id
# Gemini CLI 0.61.0's SHORT_ID_REGEX (sessionCleanup ``deriveShortIdFromFileName``): the 8 characters of the
# session id a ``session-*`` file name ends with.
_SHORT_ID = re.compile(r"-([a-zA-Z0-9]{8})\.jsonl?$")


def matches_nothing(path: str) -> str:
    """What every command says of a PATH that names no file, with its fix (no ``Error:`` prefix)."""
    return f"{path}: matches no session file. Check the path, or quote a glob"


def resolve_session_args(args: Sequence[str], roots: Sequence[Path] | None = None) -> list[str]:
    """PATH arguments with each session id (or unique prefix of one, at least 4 characters) replaced by the
    session's file under the default roots; an argument that names a file, folder or glob match stays.
    Gemini CLI names a file after the first 8 characters of its session id, so a prefix up to 8 characters
    is matched on names, a longer one against the ``sessionId`` in the file. Where a legacy ``.json`` was
    resumed into a ``.jsonl``, the ``.jsonl`` is the session. Raises UsageError for an id that matches no
    session or several, and for a word of 1 to 3 characters that names no file (an id cut too short)."""
    from ctxtool.common.errors import UsageError

    out: list[str] = []
    candidates: list[SessionPath] | None = None
    searched: list[Path] = []
    for arg in args:
        if os.path.lexists(os.path.expanduser(arg)) or glob.has_magic(arg) or _STORE_URL.match(arg):
            out.append(arg)
            continue
        if _SHORT_ID_ARG.fullmatch(arg):  # `4dd`: most likely a session id cut too short
            raise UsageError(
                f"{arg} names no file, and a session id takes 4 characters or more",
                "Pass a session file, a chats/ folder, or a longer start of an id from `ctxtool stats`",
            )
        if not _ID_ARG.fullmatch(arg):
            out.append(arg)
            continue
        if candidates is None:
            searched = list(roots) if roots is not None else default_roots()
            candidates = discover([str(r) for r in searched], subagents=False).files
        matches: dict[str, SessionPath] = {}
        for sp in candidates:
            short = short_id_of(sp.path.name)
            if short is None or not (short.startswith(arg) if len(arg) <= 8 else arg.startswith(short)):
                continue
            if len(arg) > 8 and not (_header_session_id(sp.path) or "").startswith(arg):
                continue
            if sp.group_key not in matches or sp.path.suffix == ".jsonl":
                matches[sp.group_key] = sp
        if not matches:
            raise UsageError(
                f"{arg} is neither a file nor the id of a session in {', '.join(map(str, searched))}",
                "Pass a session file, a chats/ folder, or a session id from `ctxtool stats`",
            )
        if len(matches) > 1:
            # A legacy flat subagent file carries its parent's short id (see short_id_of): the id names the
            # parent, as Gemini CLI's ``sessionExists`` finds it by the ``sessionId`` in the file.
            mains = {k: sp for k, sp in matches.items() if _file_kind(sp.path) != "subagent"}
            if len(mains) == 1:
                matches = mains
        if len(matches) > 1:
            names = ", ".join(sorted(sp.path.name for sp in matches.values())[:10])
            raise UsageError(
                f"session id {arg} is ambiguous: {len(matches)} sessions start with it: {names}",
                "Give more characters of the id",
            )
        out.append(str(next(iter(matches.values())).path))
    return out


def short_id_of(name: str) -> str | None:
    """The short id (first 8 characters of a session id) a ``session-<time>-<id8>.json[l]`` file name carries,
    as Gemini CLI derives it (``deriveShortIdFromFileName``); None for any other name.

    Gemini CLI's ``deleteSession`` (sessionOperations ``getMatchingSessionFiles``) removes every
    ``session-*-<id8>.json[l]`` in ``chats/``: the session's own files and the legacy flat subagent files
    named with its short id, "parent and subagents" as its comment says."""
    found = _SHORT_ID.search(name) if name.startswith("session-") else None
    return found.group(1) if found else None


def _header_session_id(path: Path) -> str | None:
    """``sessionId`` from the start of a session file (the first record of a .jsonl, the top of a .json)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    m = re.search(rb'"sessionId"\s*:\s*"([^"]+)"', head)
    return m.group(1).decode("utf-8", "replace") if m else None


def _file_kind(path: Path) -> str | None:
    """``kind`` from a session file's metadata: its first line (JSONL), else the whole legacy ``.json``
    document (where Gemini CLI writes it after ``messages``). Read only to settle an ambiguous id."""
    import orjson

    try:
        with open(path, "rb") as fh:
            first = fh.readline()
            try:
                meta = orjson.loads(first)
            except orjson.JSONDecodeError:
                meta = orjson.loads(first + fh.read())
    except (OSError, orjson.JSONDecodeError):
        return None
    kind = meta.get("kind") if isinstance(meta, dict) else None
    return kind if isinstance(kind, str) else None


def file_stamps(found: Discovery) -> dict[str, list[int] | None]:
    """Size and modification time (ns) of every file found, None for one that vanished: what tells a file
    read before from one that changed (ctxtool's index, the replay of a warm run)."""
    stats = [(str(sp.path), stat_or_none(sp.path)) for sp in found.files]
    return {path: None if st is None else [st.st_size, st.st_mtime_ns] for path, st in stats}
